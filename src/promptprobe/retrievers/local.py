"""The built-in local retriever: BM25 (bm25s) over a folder of documents, for the demo and
for probing without a retrieval service. Each `*.md`/`*.txt` file is one passage; its id is
the file stem."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s

from ..errors import InputError
from ..tokens import tokenize
from .base import Passage, Retriever


class LocalRetriever(Retriever):
    def __init__(self, config: dict[str, Any], base_dir: Path | None = None) -> None:
        folder = Path(config["path"])
        if not folder.is_absolute() and base_dir is not None:
            folder = base_dir / folder
        if not folder.is_dir():
            raise InputError(f"[retrieval] path {folder}: no such folder of documents")
        files = sorted(p for p in folder.iterdir() if p.suffix in (".md", ".txt") and p.is_file())
        if not files:
            raise InputError(f"[retrieval] path {folder}: no .md or .txt documents in it")
        self.passages = [Passage(p.stem, p.read_text(encoding="utf-8")) for p in files]
        self.k = int(config.get("k", 3))
        self.index = bm25s.BM25()
        self.index.index([tokenize(p.text) for p in self.passages], show_progress=False)
        self.vocabulary = set().union(*(tokenize(p.text) for p in self.passages))
        self.description = f"local bm25 {folder}"

    def retrieve(self, question: str, history: Sequence[dict[str, str]]) -> list[Passage]:
        # bm25s scores only tokens it indexed; unknown words simply do not match.
        query = [t for t in tokenize(question) if t in self.vocabulary]
        if not query:
            return []
        scores = self.index.get_scores(query)
        ranked = sorted(range(len(self.passages)), key=lambda i: (-scores[i], i))
        return [
            Passage(self.passages[i].id, self.passages[i].text, round(float(scores[i]), 6))
            for i in ranked[: self.k]
            if scores[i] > 0
        ]
