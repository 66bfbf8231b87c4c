"""Each prompt's own finished output lengths, over a sliding window of recent steps. Imports no torch.

In RL the same prompt comes back step after step (the trainer keeps one engine for the whole run,
`train.trainer`), and within a step its group's samples finish one after another. How long one of
its requests still runs is predicted far better by the lengths the prompt's own responses reached
than by the engine-wide pool (`remaining_lengths.FinishedLengths`), which mixes prompts whose typical
lengths differ several-fold. DAS (§4.2.3) keys its length history by problem over a sliding window
of recent training steps for this reason; here the window is the prompt's last `window` lengths
(64: four to eight steps of a group of 8 to 16), and at most `max_prompts` prompts are kept, the one
least recently recorded or read dropped first (8,192 of them hold at most a few tens of MB).

The history survives new weights (`Engine.advance_step`, `load_weights`), unlike acceptance
estimates: one step moves the policy's response lengths only a little, which is why DAS's window
spans several steps, and the oldest lengths leave the window as new ones arrive, so the history
follows a drift in length without forgetting what it knew at each update.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence

WINDOW = 64  # lengths kept per prompt
MAX_PROMPTS = 8192  # prompts kept, least recently used dropped first


def prompt_key(token_ids: Sequence[int]) -> int:
    """The key a prompt's history is filed under: the hash of its token ids. Python hashes a tuple of
    ints alike in every process (no hash randomisation for ints) and in 64 bits, so two prompts of a
    run share a key only with negligible odds."""
    return hash(tuple(token_ids))


class _History:
    __slots__ = ("lengths", "ordered")

    def __init__(self, window: int) -> None:
        self.lengths: deque[int] = deque(maxlen=window)
        self.ordered: tuple[int, ...] | None = None  # `lengths` sorted; None once they change


class PromptLengths:
    """The output lengths of each prompt's requests that finished most recently, `window` a prompt."""

    def __init__(self, window: int = WINDOW, max_prompts: int = MAX_PROMPTS) -> None:
        if window < 1 or max_prompts < 1:
            raise ValueError(f"need window >= 1 and max_prompts >= 1, got {window}, {max_prompts}")
        self.window, self.max_prompts = window, max_prompts
        self._histories: OrderedDict[Hashable, _History] = OrderedDict()

    def add(self, key: Hashable, length: int) -> None:
        """A request of prompt `key` finished `length` tokens long."""
        history = self._histories.get(key)
        if history is None:
            history = self._histories[key] = _History(self.window)
            if len(self._histories) > self.max_prompts:
                self._histories.popitem(last=False)
        else:
            self._histories.move_to_end(key)
        history.lengths.append(length)
        history.ordered = None

    def sorted(self, key: Hashable) -> tuple[int, ...]:
        """Prompt `key`'s lengths, sorted; () for a prompt with none. The same tuple object until the
        prompt's history changes, so the views of a forward share it rather than copy it."""
        history = self._histories.get(key)
        if history is None:
            return ()
        self._histories.move_to_end(key)
        if history.ordered is None:
            history.ordered = tuple(sorted(history.lengths))
        return history.ordered

    def __len__(self) -> int:
        """Prompts with a history."""
        return len(self._histories)
