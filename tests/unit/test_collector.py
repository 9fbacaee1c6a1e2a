"""``pgsched run`` settles the garbage collector before its loop: what it loaded is frozen, and
young objects are collected every ``YOUNG_COLLECTION_EVERY`` allocations, not Python's 700."""

from __future__ import annotations

import gc

from pgsched._cli.main import YOUNG_COLLECTION_EVERY, settle_collector


def test_a_replica_freezes_what_it_loaded_and_collects_young_objects_less_often() -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(700, *threshold[1:])  # the interpreter's default, whatever ran before
    try:
        settle_collector()
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, *threshold[1:])
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
