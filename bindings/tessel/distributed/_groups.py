"""tessel.distributed's group creation (torch's new_group, new_subgroups, new_subgroups_by_enumeration and
split_group), kept out of the package's __init__, which re-exports them. Each is collective over its parent
group: every member creates the same groups in the same order."""
from . import GroupMember, _default_group, _flush_all_p2p, _group, _remember_group
from ._c10d_extras import _count_groups


def _groups_of(parent, splits, timeout, sort_ranks=True):
    """One new group of `parent` per list of its group ranks, created in list order (collective over parent):
    the groups (NON_GROUP_MEMBER where this rank is not in one) and this rank's, or None. Each group's ranks are
    sorted, or with sort_ranks=False in the listed order (the first listed is its rank 0)."""
    _flush_all_p2p()  # (it blocks)
    groups, mine = [], None
    for split in splits:
        ranks = sorted(int(r) for r in split) if sort_ranks else [int(r) for r in split]
        g = parent.new_group(ranks)
        if g is None:
            groups.append(GroupMember.NON_GROUP_MEMBER)
            continue
        g.timeout = timeout if timeout is not None else parent.timeout
        groups.append(g)
        _remember_group(g)
        mine = g
    return groups, mine


def _check_backend(op, backend):
    if backend not in (None, "gloo", "cpu:gloo", "threads"):
        raise ValueError("%s: backend '%s' is not available from Python" % (op, backend))


def _check_disjoint(rank_lists, size, out_of_range, repeated):
    """Every rank of `rank_lists` in [0, size) and in one list only, else ValueError(out_of_range(rank)) or
    ValueError(repeated(rank, first list's index, second's))."""
    seen = {}
    for i, ranks in enumerate(rank_lists):
        for r in ranks:
            if not 0 <= int(r) < size:
                raise ValueError(out_of_range(r))
            if r in seen:
                raise ValueError(repeated(r, seen[r], i))
            seen[r] = i


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None, sort_ranks=True):
    """A group of the default group's ranks `ranks` (global ranks; all of them when None), sorted (torch's
    default), or with sort_ranks=False in the given order (ranks[0] is its rank 0). device_id (torch's device to
    bind the group to) changes nothing on the CPU. Every rank of the default group calls it, in the same order as
    its other new_group calls (torch's rule; tessel checks it and names both calls when they differ). Ranks
    outside get NON_GROUP_MEMBER. With use_local_synchronization=True (torch's), only the members need to call
    it: a member's k-th such call with a rank list pairs with the other members' k-th with the same list, and the
    other ranks take no part (one that calls anyway gets NON_GROUP_MEMBER at once)."""
    world = _default_group("new_group")
    _check_backend("new_group", backend)
    if use_local_synchronization:
        listed = [int(r) for r in (range(world.size) if ranks is None else ranks)]
        members = sorted(listed) if sort_ranks else listed
        if world.rank not in members:
            return GroupMember.NON_GROUP_MEMBER
        _flush_all_p2p()
        g = world.new_group_among_members(members)
        g.timeout = timeout if timeout is not None else world.timeout
        _count_groups(1)
        _remember_group(g)
        return g
    _count_groups(1)  # on every rank, members or not (torch)
    return _groups_of(world, [range(world.size) if ranks is None else ranks], timeout, sort_ranks)[0][0]


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None, group_desc=None):
    """torch's new_subgroups: the default group (or `group`) cut into consecutive groups of group_size ranks
    (tessel has no per-node device count to default to: group_size is required); returns (this rank's
    subgroup, all subgroups). Collective over the default group, as each new_group is; with `group`, over that
    group only (its ranks, in its rank order; the others get NON_GROUP_MEMBER entries)."""
    world = _default_group("new_subgroups") if group is None else group
    if group_size is None:
        raise ValueError("new_subgroups: group_size is required (tessel's Python face has no per-node device count)")
    if group_size <= 0:
        raise ValueError("The arg 'group_size' (%d) must be positive" % group_size)
    if world.size % group_size:
        raise ValueError("The world size (%d) must be divisible by 'group_size=%d'" % (world.size, group_size))
    if group is not None:
        _count_groups(world.size // group_size)
        subgroups, mine = _groups_of(group, [range(s, s + group_size) for s in range(0, world.size, group_size)],
                                     timeout)
        return mine, subgroups
    subgroups, mine = [], None
    for start in range(0, world.size, group_size):
        g = new_group(list(range(start, start + group_size)), timeout=timeout, backend=backend)
        subgroups.append(g)
        if start <= world.rank < start + group_size:
            mine = g
    return mine, subgroups


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None,
                                 group_desc=None):
    """torch's new_subgroups_by_enumeration: one group per list of global ranks (a rank in two lists is a
    ValueError, as torch); returns (this rank's subgroup, or None when it is in none of them, and all the
    subgroups as new_group returned them). Collective over the default group, as each new_group is."""
    world = _default_group("new_subgroups_by_enumeration")
    if not ranks_per_subgroup_list:
        raise ValueError("The arg 'ranks_per_subgroup_list' cannot be empty")
    _check_disjoint(ranks_per_subgroup_list, world.size,
                    lambda r: "new_subgroups_by_enumeration: rank %d is not in the default group of %d ranks"
                    % (r, world.size),
                    lambda r, i, j: "Rank %d has appeared in both subgroup %s and %s"
                    % (r, list(ranks_per_subgroup_list[i]), list(ranks_per_subgroup_list[j])))
    subgroups, mine = [], None
    for ranks in ranks_per_subgroup_list:
        g = new_group(list(ranks), timeout=timeout, backend=backend)
        subgroups.append(g)
        if world.rank in ranks:
            mine = g
    return mine, subgroups


def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, backend=None):
    """torch's split_group: parent_pg (default: the default group) cut into the groups of split_ranks, lists of
    ranks *of the parent* that do not overlap, each group's ranks in its list's order (split_ranks=[[1, 0]]:
    parent rank 1 is the group's rank 0); returns this rank's group, or None when no split holds it. Collective
    over the parent (each split is one new group of it, created in the listed order on every rank)."""
    parent = _group(parent_pg, "split_group")
    _check_backend("split_group", backend)
    if not split_ranks:
        raise ValueError("split_group: split_ranks cannot be None or empty")
    _check_disjoint(split_ranks, parent.size,
                    lambda r: "split_group: rank %d is not a rank of the parent group of %d ranks (split_ranks hold "
                    "the parent's group ranks)" % (r, parent.size),
                    lambda r, i, j: "split_group: rank %d appears in splits %d and %d" % (r, i, j))
    _count_groups(1)  # one per split_group call, as torch's count
    return _groups_of(parent, split_ranks, timeout, sort_ranks=False)[1]
