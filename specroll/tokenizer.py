"""A checkpoint's tokenizer, loaded from its directory only (never from a hub)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Tokenizer:
    hf: Any  # a transformers tokenizer

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def encode_prompt(self, text: str, use_chat_template: bool = True) -> list[int]:
        """A prompt's ids: as the user's message in the checkpoint's chat template, followed by the
        assistant's turn opening, when the checkpoint has one (an instruct model answers only there);
        else, or when the task asks for raw text, the text alone."""
        if not (use_chat_template and self.has_chat_template):
            return self.encode(text)
        ids = self.hf.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    def decode(self, token_ids: list[int]) -> str:
        return self.hf.decode(token_ids, skip_special_tokens=True)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        eos = self.hf.eos_token_id
        return () if eos is None else (int(eos),)


def load_tokenizer(directory: str | Path) -> Tokenizer:
    from transformers import AutoTokenizer

    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"tokenizer directory {directory} does not exist")
    try:
        return Tokenizer(AutoTokenizer.from_pretrained(str(root), local_files_only=True))
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load a tokenizer from {directory}: {err}") from None
