"""Where a SentencePiece model comes from: a .model file, or an HF XLNet directory.

An HF directory holds spiece.model, or (written by `save_pretrained` in transformers 5.x)
only tokenizer.json. A tokenizer.json whose model is a SentencePiece-style Unigram (pieces
and scores, no byte fallback) is converted back into a SentencePiece model: its pieces,
scores and precompiled normalisation charsmap, with XLNet's special pieces typed as ours
(tokenizer.py). The conversion is kept only if it tokenizes identically: on a test text
made of the vocabulary's own pieces, the model applied after our normalisation
(normalize.normalize with the directory's tokenizer_config.json settings) must give the ids
that the `tokenizers` package gives from tokenizer.json. Converted models are cached on
this host by the tokenizer.json's hash, so `prepare --spm_model DIR` and `--init_from DIR`
see the same bytes.

`spm_fingerprint` names what tokenizes: the pieces, scores, types and normalisation, not the
training options a .model file also stores, so a converted model matches its original.
"""

import base64
import hashlib
import json
import os
import unicodedata

import sentencepiece as spm
from etils import epath

from xlnet_jax import paths
from xlnet_jax.data import tokenizer
from xlnet_jax.data.normalize import normalize
from xlnet_jax.data.spm_proto import sentencepiece_model_pb2
from xlnet_jax.errors import DataError

SPIECE_FILE = "spiece.model"  # the SentencePiece model's name in HF XLNet directories
CONFIG_FILE = "tokenizer_config.json"
JSON_FILE = "tokenizer.json"
HOW_TO_GET_SPIECE = (
    f"copy {SPIECE_FILE} from the checkpoint it came from (an `xlnet-jax export-hf` "
    "directory or the original model's files), or write one with transformers 4.x: "
    "`XLNetTokenizer.from_pretrained(SRC).save_vocabulary(DIR)`"
)
_CONTROL = ("<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
_USER_DEFINED = ("<eop>",)
_JAMO = ("\u1100", "\u11ff")  # conjoining Hangul jamo, as NFKD spells syllables
_PIECES_PER_TEST_LINE = 16


def read_settings(directory: epath.Path) -> dict:
    """{"keep_accents", "uncased"} from directory's tokenizer_config.json.

    A missing file or key takes XLNetTokenizer's default (False), as transformers would
    (the released XLNet models ship none: cased, accents stripped).
    """
    path = directory / CONFIG_FILE
    try:
        config = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    return {
        "keep_accents": bool(config.get("keep_accents", False)),
        "uncased": bool(config.get("do_lower_case", False)),
    }


def resolve_spm_model(path: str) -> str:
    """`prepare --spm_model PATH`: a .model file as it is; for an HF directory, its
    spiece.model or the model converted from its tokenizer.json."""
    if not paths.as_path(path).is_dir():
        return path
    found = find_spm_model(path)
    if found is None:
        raise DataError(f"{path} holds neither {SPIECE_FILE} nor {JSON_FILE}; {HOW_TO_GET_SPIECE}.")
    return found


def find_spm_model(directory: str | os.PathLike) -> str | None:
    """The SentencePiece model of an HF directory (local or gs://): spiece.model, else one
    converted from tokenizer.json; None if it holds neither. A tokenizer.json that cannot
    be converted exactly is a DataError saying how to get a spiece.model."""
    root = paths.as_path(directory)
    if (root / SPIECE_FILE).is_file():
        return os.fspath(root / SPIECE_FILE)
    if (root / JSON_FILE).is_file():
        return convert_tokenizer_json(root)
    return None


def convert_tokenizer_json(root: epath.Path) -> str:
    """A local .model converted from root/tokenizer.json, checked to tokenize identically."""
    source = root / JSON_FILE
    text = source.read_text()
    cached = os.path.join(
        paths.local_cache("spm-from-tokenizer-json"),
        hashlib.sha256(text.encode()).hexdigest()[:16] + ".model",
    )
    if os.path.isfile(cached):
        return cached
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{source}: not valid JSON ({e}); {HOW_TO_GET_SPIECE}.") from None
    model = spec.get("model") or {}
    if model.get("type") != "Unigram" or model.get("byte_fallback"):
        kind = f"{model.get('type')}" + (
            " with byte fallback" if model.get("byte_fallback") else ""
        )
        raise DataError(
            f"{source}: its model is {kind}, not a SentencePiece unigram model; "
            f"{HOW_TO_GET_SPIECE}."
        )
    proto = _model_proto(model["vocab"], model.get("unk_id") or 0, _charsmap(spec["normalizer"]))
    data = proto.SerializeToString()
    sp = spm.SentencePieceProcessor(model_proto=data)
    tokenizer.check_special_ids(sp, os.fspath(source))
    _check_same_ids(text, sp, read_settings(root), source)
    paths.write_bytes_atomic(epath.Path(cached), data)
    return cached


def spm_fingerprint(path: str) -> str:
    """A hex sha256 of what a .model tokenizes with (pieces, scores, types, normalisation);
    a file that is no model is fingerprinted by its bytes, and so matches no model."""
    data = paths.as_path(path).read_bytes()
    try:
        proto = sentencepiece_model_pb2.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: not a model
        return hashlib.sha256(data).hexdigest()
    normalizer = proto.normalizer_spec
    content = {
        "pieces": [(p.piece, p.score, p.type) for p in proto.pieces],
        "charsmap": hashlib.sha256(normalizer.precompiled_charsmap).hexdigest(),
        "flags": [
            normalizer.add_dummy_prefix,
            normalizer.remove_extra_whitespaces,
            normalizer.escape_whitespaces,
        ],
    }
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def _charsmap(normalizer: dict | None) -> bytes:
    """The precompiled charsmap of tokenizer.json's normaliser (b"" when it has none)."""
    steps = (normalizer or {}).get("normalizers", [normalizer] if normalizer else [])
    for step in steps:
        if step.get("type") == "Precompiled":
            return base64.b64decode(step["precompiled_charsmap"])
    return b""


def _spm_piece(piece: str) -> str:
    """A piece as SentencePiece holds it: Hangul syllables whole (HF's spell them in jamo)."""
    if any(_JAMO[0] <= c <= _JAMO[1] for c in piece):
        return unicodedata.normalize("NFC", piece)
    return piece


def _model_proto(vocab: list, unk_id: int, charsmap: bytes):
    """A unigram ModelProto of (piece, score) pairs, XLNet's special pieces typed as ours."""
    Piece = sentencepiece_model_pb2.ModelProto.SentencePiece  # noqa: N806 - a proto class
    proto = sentencepiece_model_pb2.ModelProto()
    for index, (piece, score) in enumerate(vocab):
        if index == unk_id:
            kind = Piece.UNKNOWN
        elif piece in _CONTROL:
            kind = Piece.CONTROL
        elif piece in _USER_DEFINED:
            kind = Piece.USER_DEFINED
        else:
            kind = Piece.NORMAL
        proto.pieces.add(piece=_spm_piece(piece), score=score, type=kind)
    pieces = [p for p, _ in vocab]
    spec = proto.trainer_spec
    spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    spec.vocab_size = len(vocab)
    spec.unk_id = unk_id
    spec.bos_id = pieces.index("<s>") if "<s>" in pieces else -1
    spec.eos_id = pieces.index("</s>") if "</s>" in pieces else -1
    spec.pad_id = -1  # <pad> is a control piece, as in ours
    normalizer = proto.normalizer_spec
    normalizer.name = "nmt_nfkc" if charsmap else "identity"
    normalizer.precompiled_charsmap = charsmap
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    return proto


def _test_lines(sp: spm.SentencePieceProcessor) -> list[str]:
    """Every normal piece of the vocabulary, 16 to a line, word marks as spaces (<eop> is
    left out: HF matches it as an added token, SentencePiece after a word mark)."""
    pieces = [
        sp.id_to_piece(i).replace("\u2581", " ")
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i))
        and sp.id_to_piece(i) not in _USER_DEFINED
    ]
    return [
        "".join(pieces[i : i + _PIECES_PER_TEST_LINE]).strip()
        for i in range(0, len(pieces), _PIECES_PER_TEST_LINE)
    ]


def _check_same_ids(
    json_text: str, sp: spm.SentencePieceProcessor, settings: dict, source: epath.Path
) -> None:
    """Refuses a conversion that gives other ids than tokenizer.json on the test lines."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise DataError(
            f"{source}: converting it needs the `tokenizers` package (the hf extra: pip "
            f"install -e '.[hf]' in the project's checkout); or {HOW_TO_GET_SPIECE}."
        ) from None
    hf = Tokenizer.from_str(json_text)
    for line in _test_lines(sp):
        ours = sp.encode(normalize(line, **settings))
        if ours != hf.encode(line, add_special_tokens=False).ids:
            raise DataError(
                f"{source}: converted to SentencePiece it tokenizes {line[:40]!r} otherwise "
                f"than tokenizer.json does; {HOW_TO_GET_SPIECE}."
            )
