"""`xlnet-jax export-hf`: a params directory or a train workdir -> a HuggingFace directory."""

from xlnet_jax import paths
from xlnet_jax.checkpoint import hf, hf_tokenizer
from xlnet_jax.checkpoint.reader import load_trained_params
from xlnet_jax.config import ModelConfig
from xlnet_jax.data.manifest import load_manifest


def export_to_hf(source: str, out: str) -> str:
    """Writes `source`'s weights to `out` as transformers.XLNetLMHeadModel loads them.

    `source` is a params directory (from import-hf) or a train workdir, whose newest
    checkpoint is exported together with the run's tokenizer when its corpus is at hand
    (spiece.model, and the HF tokenizer files of its normalisation: hf_tokenizer).

    Returns:
      A line for the user about what was exported, or "" for a params directory.
    """
    if not (paths.as_path(source) / "checkpoints").is_dir():
        hf.export_hf(source, out)
        return ""
    config, params, step = load_trained_params(source)
    hf.save_hf(out, ModelConfig.from_config(config), params)
    note = "no tokenizer copied: the run's corpus_dir is not here"
    if (paths.as_path(config.corpus_dir) / "manifest.json").is_file():
        manifest = load_manifest(config.corpus_dir)
        tokenizer = paths.as_path(manifest.tokenizer_path)
        tokenizer.copy(paths.as_path(out) / hf.TOKENIZER_FILE, overwrite=True)
        settings = hf_tokenizer.write_tokenizer_files(
            paths.as_path(out),
            manifest.tokenizer_path,
            keep_accents=manifest.keep_accents,
            uncased=manifest.uncased,
        )
        note = f"tokenizer {tokenizer} copied as spiece.model; {settings}"
    return f"exported step {step} of {source} (its newest checkpoint) to {out}; {note}"
