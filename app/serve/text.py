"""Generated token ids to text in the HTTP front: incremental detokenization and stop strings (mlx-free).

The engine worker sends token ids; ``TextStream`` (one per request) turns them into text deltas as they arrive.
Detokenization is incremental over a sliding window (the approach of Hugging Face's ``TextStreamer`` and vLLM's
detokenizer): a token's text is what decoding ``ids[prefix:]`` adds to decoding ``ids[prefix:read]``, held back
while it ends in an incomplete UTF-8 sequence (U+FFFD). When the request ends, the whole output is decoded once:
the text returned is exactly ``tokenizer.decode(ids)`` (what ``slabscope generate`` prints), whatever the deltas
said before. Stop strings are searched in the text as it grows; a match cuts the text before the stop string and
ends the request (the front then cancels it in the engine); a streamed delta never includes a tail that could
still become a stop string.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


class TextStream:
    """Owns one request's ids and text. ``add(ids)`` takes new tokens; ``take()`` returns the text not sent yet
    that is safe to send; ``finish()`` the rest. ``stopped`` once a stop string matched (``tokens_used`` counts
    the ids up to and including the one that completed it)."""

    def __init__(self, tokenizer, stop: list[str] = (), eos_ids=()) -> None:
        self.decode = tokenizer.decode
        self.stop = [s for s in stop if s]
        self.eos_ids = frozenset(eos_ids)
        self.ids: list[int] = []
        self.text = ""        # text of ids[:read] (cut at a stop string when one matched)
        self.sent = 0         # characters of ``text`` returned by take()
        self.stopped = False
        self.tokens_used = 0  # ids the answer consumed (all of them unless a stop string cut it)
        self._prefix = 0
        self._read = 0

    def add(self, ids: list[int], last: bool = False) -> None:
        """Take new token ids (``last``: the request's final ones; a trailing end-of-sequence id is not text)."""
        if self.stopped:
            return
        for position, token in enumerate(ids):
            self.tokens_used += 1
            if last and position == len(ids) - 1 and token in self.eos_ids:
                return
            self.ids.append(int(token))
            before = self.decode(self.ids[self._prefix:self._read])
            after = self.decode(self.ids[self._prefix:])
            if len(after) > len(before) and not after.endswith(REPLACEMENT):
                self._grow(after[len(before):])
                self._prefix, self._read = self._read, len(self.ids)
                if self.stopped:
                    return

    def _grow(self, new: str) -> None:
        """Append ``new`` to the text and cut it at the first stop string that now appears."""
        start = max(0, len(self.text) - max((len(s) for s in self.stop), default=0) + 1)
        self.text += new
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            self.stopped = True

    def take(self) -> str:
        """Text not returned yet, less a tail that may be the start of a stop string."""
        end = len(self.text) - self._held()
        if end <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:end], end
        return out

    def _held(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        if self.stopped or not self.stop:
            return 0
        longest = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def finish(self) -> str:
        """The request ended: the final text (the whole output decoded at once, cut at a stop string) and what of it
        ``take`` has not returned (everything after the text already returned, or the whole remainder)."""
        if not self.stopped:
            self.text = self.decode(self.ids)
        rest = self.text[self.sent:]
        self.sent = len(self.text)
        return rest
