"""The tokenizer files of an HF export, so transformers turns text into our ids.

Beside spiece.model an export gets:
  * tokenizer_config.json: do_lower_case and keep_accents (the corpus's normalisation, read
    back by import-hf and --init_from), the special tokens, and model_input_names with
    token_type_ids (transformers 5 returns only the inputs named there; XLNet needs them);
  * tokenizer.json (when the `tokenizers` package is installed): our normalisation as a
    tokenizers normaliser, then SentencePiece's own (its precompiled charsmap), and the
    vocabulary with its scores.

transformers' XLNetTokenizer (5.23) does not read a normaliser from tokenizer.json: it always
applies NFKD and strips accents, then the charsmap (keep_accents changes nothing), and its
charsmap step leaves NFKD's Hangul jamo apart. Two consequences:
  * default corpora: tokenizer.json spells each Hangul syllable of the vocabulary in jamo
    (NFD), as both tokenizers then see it, so XLNetTokenizer and AutoTokenizer give our ids
    on Korean too (their tokens print in jamo; NFC joins them again);
  * --keep_accents corpora: XLNetTokenizer cannot keep accents, so tokenizer_config.json
    names the generic PreTrainedTokenizerFast, which AutoTokenizer loads from tokenizer.json
    as written: our normalisation exactly.
One step of ours no tokenizers pipeline can take: the original's digit-comma split
(data/tokenizer.py), made after SentencePiece has chosen its pieces. transformers 4's slow
XLNetTokenizer makes it; with transformers 5 those pieces stay whole (finetune/hf_ids.py
counts the rows it changes).
"""

import json
import unicodedata

import sentencepiece as spm
from etils import epath

from xlnet_jax import paths
from xlnet_jax.data import normalize, tokenizer
from xlnet_jax.data.spm_proto import sentencepiece_model_pb2
from xlnet_jax.data.spm_source import CONFIG_FILE, JSON_FILE

_HANGUL = ("\uac00", "\ud7a3")  # the precomposed syllables


def write_tokenizer_files(
    out: epath.Path, spm_path: str, *, keep_accents: bool, uncased: bool
) -> str:
    """Writes tokenizer_config.json and, with `tokenizers` installed, tokenizer.json to out.

    Returns:
      A note for the user about what transformers will do with them.
    """
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast" if keep_accents else "XLNetTokenizer",
        "do_lower_case": uncased,
        "keep_accents": keep_accents,
        "remove_space": True,
        "padding_side": "left",
        # transformers 5 returns token_type_ids only for the inputs named here (4.x always
        # did); without them XLNet runs with every token in segment A.
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        **{f"{name}_token": f"<{name}>" for name in ("unk", "sep", "pad", "cls", "mask")},
        "bos_token": "<s>",
        "eos_token": "</s>",
        "additional_special_tokens": ["<eop>", "<eod>"],
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    try:
        backend = _backend_tokenizer(spm_path, keep_accents, uncased)
    except ImportError:
        return f"no {JSON_FILE} (install `tokenizers` to write one): HF may tokenize otherwise"
    (out / JSON_FILE).write_text(backend.to_str(pretty=True))
    if keep_accents:
        return "load the tokenizer with AutoTokenizer: XLNetTokenizer (5.23) drops accents"
    return (
        "XLNetTokenizer and AutoTokenizer give this corpus's ids, but where a piece ends in a "
        "digit and ',' (the original's split, which transformers 5 cannot make)"
    )


def _hf_piece(piece: str, keep_accents: bool) -> str:
    """The piece as HF's model sees it: Hangul syllables in jamo unless accents are kept."""
    if keep_accents:
        return piece
    return "".join(
        unicodedata.normalize("NFD", c) if _HANGUL[0] <= c <= _HANGUL[1] else c for c in piece
    )


def _ranges(chars: str) -> str:
    """A regex character class of `chars` (sorted code points), as \\x{...} ranges."""
    codes, parts, i = sorted(map(ord, chars)), [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        parts.append(f"\\x{{{codes[i]:x}}}" + (f"-\\x{{{codes[j]:x}}}" if j > i else ""))
        i = j + 1
    return "[" + "".join(parts) + "]"


def _backend_tokenizer(spm_path: str, keep_accents: bool, uncased: bool):
    """A tokenizers.Tokenizer that encodes as normalize + our SentencePiece model do."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram
    from tokenizers.processors import TemplateProcessing

    model = paths.as_path(spm_path).read_bytes()  # local or gs://
    proto = sentencepiece_model_pb2.ModelProto.FromString(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    vocab = [
        (_hf_piece(sp.id_to_piece(i), keep_accents), sp.get_score(i))
        for i in range(sp.get_piece_size())
    ]
    backend = Tokenizer(Unigram(vocab, unk_id=tokenizer.SPECIAL_IDS["<unk>"], byte_fallback=False))
    steps = [
        normalizers.Replace(Regex(normalize.CONTROL_CHARS.pattern), " "),
        normalizers.Replace("``", '"'),
        normalizers.Replace("''", '"'),
    ]
    if not keep_accents:
        marks = _ranges(normalize.combining_marks())
        steps += [normalizers.NFKD(), normalizers.Replace(Regex(marks), "")]
    if uncased:
        steps.append(normalizers.Lowercase())
    steps += [
        normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
        normalizers.Replace(Regex(" {2,}"), " "),
    ]
    backend.normalizer = normalizers.Sequence(steps)
    mark = "\u2581"
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(mark, "always")]
    )
    backend.decoder = decoders.Metaspace(mark, "always")
    backend.add_special_tokens([AddedToken(p, special=True) for p in tokenizer.SPECIAL_PIECES])
    sep, cls = tokenizer.SEP_ID, tokenizer.CLS_ID
    backend.post_processor = TemplateProcessing(
        single="$A:0 <sep>:0 <cls>:2",
        pair="$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
        special_tokens=[("<sep>", sep), ("<cls>", cls)],
    )
    return backend
