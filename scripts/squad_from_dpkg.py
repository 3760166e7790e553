"""Builds a small SQuAD 2.0-format task from this machine's Debian package database.

Each installed package's entry in /var/lib/dpkg/status (as dpkg wrote it; Status,
Conffiles and the long description's continuation lines left out, so that a small model's
windows hold most entries whole) is a paragraph. Its questions ask for fields of that
entry; a field the entry lacks, or the maintainer of another package, makes an unanswerable
question:

  Who maintains P?                         Maintainer, without the e-mail address
  Which section is P in?                   Section
  Which version of P is this?              Version
  What is the first package P depends on?  first name in Depends   (none: unanswerable)
  Where is the homepage of P?              Homepage                (none: unanswerable)
  Who maintains Q?  (Q another package)    unanswerable

Packages go to dev when a hash of their name says so (about 15%), so a package's questions
are all in one split. --asked_fields keeps only the lines the questions are about (Package,
Section, Maintainer, Version, Depends, Homepage): short paragraphs, mostly one window. Usage:
  python scripts/squad_from_dpkg.py OUT_DIR [--status /var/lib/dpkg/status] [--asked_fields]
writes OUT_DIR/train-v2.0.json and OUT_DIR/dev-v2.0.json and prints their sizes.
"""

import argparse
import hashlib
import json
import pathlib
import re

DROPPED_FIELDS = ("Status", "Conffiles")
ASKED_FIELDS = ("Package", "Section", "Maintainer", "Version", "Depends", "Homepage")


def entries(status: str, asked_only: bool) -> list[tuple[str, dict[str, tuple[int, str]]]]:
    """(paragraph text, {field: (offset of its value in the text, value's first line)})."""
    out = []
    for block in status.split("\n\n"):
        lines, fields = [], {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                continue
            name, _, value = line.partition(":")
            if name in DROPPED_FIELDS or (asked_only and name not in ASKED_FIELDS):
                continue
            offset = sum(len(x) + 1 for x in lines) + len(name) + 1
            value_start = offset + len(value) - len(value.lstrip())
            fields[name] = (value_start, value.strip())
            lines.append(line)
        if "Package" in fields:
            out.append(("\n".join(lines), fields))
    return out


def _answer(fields, name: str, pattern: str) -> tuple[int, str] | None:
    """(start, text) of the first match of `pattern` at the start of field `name`'s value."""
    if name not in fields:
        return None
    start, value = fields[name]
    match = re.match(pattern, value)
    return (start, match.group(0).strip()) if match and match.group(0).strip() else None


def questions(text, fields, other: str, key: str) -> list[dict]:
    package = fields["Package"][1]
    asked = [
        (f"Who maintains {package}?", _answer(fields, "Maintainer", r"[^<]+")),
        (f"Which section is {package} in?", _answer(fields, "Section", r"\S+")),
        (f"Which version of {package} is this?", _answer(fields, "Version", r"\S+")),
        (
            f"What is the first package {package} depends on?",
            _answer(fields, "Depends", r"[a-z0-9][a-z0-9.+-]*"),
        ),
        (f"Where is the homepage of {package}?", _answer(fields, "Homepage", r"\S+")),
        (f"Who maintains {other}?", None),
    ]
    out = []
    for i, (question, answer) in enumerate(asked):
        qa = {"id": f"{key}-{i}", "question": question, "is_impossible": answer is None}
        qa["answers"] = [] if answer is None else [{"text": answer[1], "answer_start": answer[0]}]
        if answer is not None:
            assert text[answer[0] : answer[0] + len(answer[1])] == answer[1], (package, answer)
        out.append(qa)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--status", default="/var/lib/dpkg/status")
    parser.add_argument("--asked_fields", action="store_true", help="only the asked fields")
    args = parser.parse_args()
    found = entries(pathlib.Path(args.status).read_text(encoding="utf-8"), args.asked_fields)
    names = [fields["Package"][1] for _, fields in found]
    splits: dict[str, list] = {"train": [], "dev": []}
    for n, (text, fields) in enumerate(found):
        package = fields["Package"][1]
        maintainer = fields.get("Maintainer", (0, ""))[1]
        others = [
            names[(n + k) % len(names)]
            for k in range(1, len(names))
            if found[(n + k) % len(names)][1].get("Maintainer", (0, ""))[1] != maintainer
        ]
        digest = hashlib.sha256(package.encode()).digest()[0]
        split = "dev" if digest < 256 * 0.15 else "train"
        paragraph = {"context": text, "qas": questions(text, fields, others[0], package)}
        splits[split].append({"title": package, "paragraphs": [paragraph]})
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, articles in splits.items():
        qas = [qa for a in articles for p in a["paragraphs"] for qa in p["qas"]]
        impossible = sum(qa["is_impossible"] for qa in qas)
        path = out / f"{split}-v2.0.json"
        path.write_text(json.dumps({"version": "v2.0", "data": articles}, ensure_ascii=False))
        print(f"{path}: {len(articles)} packages, {len(qas)} questions, {impossible} unanswerable")


if __name__ == "__main__":
    main()
