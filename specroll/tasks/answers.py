"""Reading the final numeric answer out of free text, as GSM8K graders do.

Where a response states its answer, in order of preference: the number after the last `####`
(GSM8K's own format), the number after the last "answer is" ("The answer is: 18"), else the last
number in the text. Numbers may carry thousands commas, a `$` and a trailing full stop
("$1,200." reads 1200); they compare by value, so "18.00" equals "18".
"""

from __future__ import annotations

import re
from decimal import Decimal

# thousands groups only where they are well formed ("1,200"), so "3,4" reads as 3 then 4
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_MARKERS = (re.compile(r"####"), re.compile(r"answer is", re.IGNORECASE))


def final_answer(text: str) -> str | None:
    """The final answer's number as written (commas removed), or None when the text has no number."""
    for marker in _MARKERS:
        starts = [m.end() for m in marker.finditer(text)]
        if starts:
            number = _NUMBER.search(text, starts[-1])
            if number is not None:
                return number.group().replace(",", "")
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def parse_number(text: str) -> Decimal | None:
    """The value of one written number ("$1,200.", "18.00", "-3"), or None when it is not one."""
    cleaned = text.strip().replace(",", "").lstrip("$").rstrip(".")
    if cleaned.startswith("-$"):
        cleaned = "-" + cleaned[2:]
    if not re.fullmatch(r"-?\d+(?:\.\d+)?", cleaned):
        return None
    return Decimal(cleaned)


def is_same_number(response_text: str, gold: str) -> bool:
    """True when the response's final answer has the value of `gold` (a number or a text ending in one)."""
    got, want = final_answer(response_text), final_answer(gold)
    if got is None or want is None:
        return False
    return parse_number(got) == parse_number(want)
