"""The processes: init, rank, world size, barrier and process groups (subsets of the ranks).

    import tensorkiln.distributed as dist
    dist.init()                       # once per process; world size 1 without mpiexec
    dist.rank(), dist.world_size()
    row = dist.new_group([0, 1])      # every rank calls it, in the same order (as torch.distributed)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime import communicator


@dataclass(frozen=True)
class ProcessGroup:
    """A set of world ranks that run collectives together; `ranks` is () for the whole world."""

    ranks: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return communicator.group_size(self.ranks)

    @property
    def rank(self) -> int:
        """This process's position in the group."""
        return communicator.group_rank(self.ranks)

    def __contains__(self, world_rank: int) -> bool:
        return world_rank in communicator.group_ranks(self.ranks)

    def __repr__(self) -> str:
        return "ProcessGroup(world)" if not self.ranks else f"ProcessGroup({list(self.ranks)})"


WORLD = ProcessGroup()


def init(check_agreement: bool = True) -> None:
    """Start MPI. check_agreement: every collective first checks that all ranks call it alike."""
    communicator.init(check_agreement)


def is_initialized() -> bool:
    return communicator.is_initialized()


def _group(group: ProcessGroup | None) -> tuple[int, ...]:
    if group is not None and not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup (dist.new_group) or None, got {type(group).__name__}")
    return (group or WORLD).ranks


def rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in the world, or its position in `group`."""
    return communicator.group_rank(_group(group)) if group is not None else communicator.rank()


def world_size(group: ProcessGroup | None = None) -> int:
    """The number of ranks in the world, or in `group`."""
    return communicator.group_size(_group(group)) if group is not None else communicator.world_size()


def barrier(group: ProcessGroup | None = None) -> None:
    """Wait until every rank of the group has reached this call."""
    communicator.barrier(_group(group))


def new_group(ranks) -> ProcessGroup:
    """A group of the given world ranks; every rank of the world calls it, in the same order."""
    return ProcessGroup(communicator.new_group(ranks))


def group_ranks(group: ProcessGroup | None = None) -> tuple[int, ...]:
    """The world ranks of a group, in order."""
    return communicator.group_ranks(_group(group))
