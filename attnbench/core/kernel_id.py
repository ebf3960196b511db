"""The kernel a record names: its label is made from this value and parsed back into it."""

from __future__ import annotations

from dataclasses import dataclass

ROUTED = "auto→"


@dataclass(frozen=True)
class KernelId:
    """`ran`: library, version, kernel (no " ("); `how`: the parenthesised rest; `routed`: PyTorch chose
    `ran`'s last word."""

    ran: str
    how: str = ""
    routed: bool = False

    @property
    def choice(self) -> str | None:
        return self.ran.rpartition(" ")[2] if self.routed else None

    @property
    def label(self) -> str:
        """'torch 2.13.0+cpu sdpa auto→FLASH_ATTENTION (is_causal)'."""
        head, space, last = self.ran.rpartition(" ")
        ran = f"{head}{space}{ROUTED}{last}" if self.routed else self.ran
        return f"{ran} {self.how}" if self.how else ran

    @classmethod
    def parse(cls, label: str) -> KernelId:
        ran, cut, how = label.replace(ROUTED, "").partition(" (")
        return cls(ran, f"({how}" if cut else "", ROUTED in label)
