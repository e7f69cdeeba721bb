"""The contract every `Leases` implementation must pass.

Subclass `LeaseContract` in a test module and provide a `leases` fixture
built on the `clock` fixture (a `FakeClock`), so expiry is tested by moving
time, never by sleeping::

    import pytest
    from taskloom.testing.lease_contract import LeaseContract

    class TestMyLeases(LeaseContract):
        @pytest.fixture
        async def leases(self, clock, tmp_path):
            leases = MyLeases(tmp_path / "leases.db", clock=clock)
            yield leases
            await leases.close()

        # Optional: durable leases show the same state through a second instance.
        @pytest.fixture
        def reopen(self, clock, tmp_path):
            return lambda: MyLeases(tmp_path / "leases.db", clock=clock)

Override the `capabilities` fixture to declare less than every
`Capability`: leases kept in one process leave out `SPANS_PROCESSES`, and
the reopen test is skipped with that reason. With pytest-asyncio in strict mode, decorate async fixtures with
`@pytest_asyncio.fixture`; the tests themselves carry the asyncio mark.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from .._extras import needs_extra
from ..backends import Capability, Fence, Leases
from .capabilities import CapabilityGate, requires
from .clock import FakeClock

with needs_extra("taskloom.testing's contract suites"):
    import pytest

__all__ = ["LeaseContract"]


async def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        await close()


@pytest.mark.asyncio
class LeaseContract(CapabilityGate):
    """Acquisition, contention, expiry, renewal, release and fencing generations."""

    TTL = 30.0

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The time every lease sees; the `leases` fixture must be built on it."""
        return FakeClock()

    @pytest.fixture
    def leases(self, clock: FakeClock) -> Leases:
        """The implementation under test; override it."""
        raise NotImplementedError("override the `leases` fixture to test an implementation")

    @pytest.fixture
    def reopen(self) -> Callable[[], Leases]:
        """A factory for a second instance over the same state (leases, or a backend
        whose `leases` are used); override for durable leases."""
        pytest.skip("no `reopen` fixture: leases kept in process memory have nothing to reopen")

    # -- acquisition and contention -------------------------------------------------

    async def test_implements_the_protocol(self, leases: Leases) -> None:
        assert isinstance(leases, Leases)

    async def test_acquire_free_key(self, leases: Leases, clock: FakeClock) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        assert (lease.key, lease.holder) == ("job", "worker-a")
        assert lease.generation >= 1
        assert lease.expires_at == clock() + self.TTL
        assert lease.fence == Fence("job", lease.generation)
        assert await leases.current("job") == lease

    async def test_held_key_refuses_everyone(self, leases: Leases) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        assert await leases.acquire("job", "worker-b", self.TTL) is None
        # Not even the holder gets a second grant: that would bump the generation.
        assert await leases.acquire("job", "worker-a", self.TTL) is None
        assert await leases.current("job") == lease

    async def test_keys_are_independent(self, leases: Leases) -> None:
        a = await leases.acquire("job-1", "worker-a", self.TTL)
        b = await leases.acquire("job-2", "worker-b", self.TTL)
        assert a is not None and b is not None
        await leases.release(a)
        assert await leases.current("job-2") == b
        assert await leases.current("job-1") is None

    async def test_take_over_moves_a_live_lease_to_a_new_generation(
        self, leases: Leases, clock: FakeClock
    ) -> None:
        dead = await leases.acquire("job", "worker-dead", self.TTL)
        assert dead is not None
        taken = await leases.take_over(dead, "worker-b", self.TTL)
        assert taken is not None
        assert (taken.holder, taken.generation) == ("worker-b", dead.generation + 1)
        assert taken.expires_at == clock() + self.TTL
        assert await leases.current("job") == taken
        assert await leases.renew(dead, self.TTL) is None  # the dead holder lost it

    async def test_take_over_needs_the_lease_to_be_current(self, leases: Leases) -> None:
        dead = await leases.acquire("job", "worker-dead", self.TTL)
        assert dead is not None
        first = await leases.take_over(dead, "worker-b", self.TTL)
        assert first is not None
        # A second taker working from the same stale view loses: one winner.
        assert await leases.take_over(dead, "worker-c", self.TTL) is None
        assert await leases.current("job") == first

    async def test_unknown_key_has_no_lease(self, leases: Leases) -> None:
        assert await leases.current("never-taken") is None

    async def test_concurrent_acquire_has_one_winner(self, leases: Leases) -> None:
        results = await asyncio.gather(
            *(leases.acquire("job", f"worker-{i}", self.TTL) for i in range(20))
        )
        winners = [lease for lease in results if lease is not None]
        assert len(winners) == 1
        assert await leases.current("job") == winners[0]

    # -- expiry -------------------------------------------------------------------

    async def test_lease_lapses_exactly_at_expiry(self, leases: Leases, clock: FakeClock) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        clock.advance(self.TTL - 0.5)
        assert await leases.current("job") == lease
        assert await leases.acquire("job", "worker-b", self.TTL) is None
        clock.now = lease.expires_at
        assert await leases.current("job") is None

    async def test_expired_lease_goes_to_the_next_holder(
        self, leases: Leases, clock: FakeClock
    ) -> None:
        old = await leases.acquire("job", "worker-a", self.TTL)
        assert old is not None
        clock.advance(self.TTL + 1)
        new = await leases.acquire("job", "worker-b", self.TTL)
        assert new is not None
        assert new.holder == "worker-b"
        assert new.generation > old.generation
        assert new.expires_at == clock() + self.TTL
        # The stalled holder wakes up: it can neither extend nor free the key.
        assert await leases.renew(old, self.TTL) is None
        await leases.release(old)
        assert await leases.current("job") == new

    # -- renewal ------------------------------------------------------------------

    async def test_renew_extends_under_the_same_generation(
        self, leases: Leases, clock: FakeClock
    ) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        clock.advance(self.TTL - 1)
        renewed = await leases.renew(lease, self.TTL)
        assert renewed is not None
        assert (renewed.key, renewed.holder, renewed.generation) == (
            "job",
            "worker-a",
            lease.generation,
        )
        assert renewed.expires_at == clock() + self.TTL
        clock.advance(self.TTL - 1)
        # Past the original expiry, alive thanks to the renewal.
        assert await leases.current("job") == renewed
        assert await leases.acquire("job", "worker-b", self.TTL) is None

    async def test_renew_may_shorten(self, leases: Leases, clock: FakeClock) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        renewed = await leases.renew(lease, 1.0)
        assert renewed is not None and renewed.expires_at == clock() + 1.0
        clock.advance(1.0)
        assert await leases.current("job") is None

    async def test_renew_after_expiry_fails_even_without_successor(
        self, leases: Leases, clock: FakeClock
    ) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        clock.advance(self.TTL)
        assert await leases.renew(lease, self.TTL) is None
        assert await leases.current("job") is None

    async def test_renew_after_release_fails(self, leases: Leases) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        await leases.release(lease)
        assert await leases.renew(lease, self.TTL) is None
        assert await leases.current("job") is None

    async def test_renewed_lease_can_be_released(self, leases: Leases) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        renewed = await leases.renew(lease, self.TTL)
        assert renewed is not None
        await leases.release(renewed)
        assert await leases.current("job") is None

    # -- release ------------------------------------------------------------------

    async def test_release_frees_the_key(self, leases: Leases) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        await leases.release(lease)
        assert await leases.current("job") is None
        again = await leases.acquire("job", "worker-b", self.TTL)
        assert again is not None and again.generation > lease.generation
        await leases.release(lease)  # a second release of the old lease is a no-op
        assert await leases.current("job") == again

    async def test_release_of_a_lease_never_granted_is_a_no_op(self, leases: Leases) -> None:
        held = await leases.acquire("job", "worker-a", self.TTL)
        assert held is not None
        await leases.release(dataclasses.replace(held, key="never-taken"))
        await leases.release(dataclasses.replace(held, generation=held.generation + 1))
        assert await leases.current("job") == held
        assert await leases.acquire("never-taken", "worker-b", self.TTL) is not None

    # -- generations --------------------------------------------------------------

    async def test_generation_rises_with_every_acquisition(
        self, leases: Leases, clock: FakeClock
    ) -> None:
        generations: list[int] = []
        for i in range(6):
            lease = await leases.acquire("job", f"worker-{i}", self.TTL)
            assert lease is not None
            generations.append(lease.generation)
            # Alternate the two ways a lease ends: release, and lapse.
            if i % 2:
                await leases.release(lease)
            else:
                clock.advance(self.TTL)
        assert generations == sorted(set(generations)), generations

    async def test_renew_does_not_bump_generation(self, leases: Leases) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        for _ in range(3):
            renewed = await leases.renew(lease, self.TTL)
            assert renewed is not None and renewed.generation == lease.generation
            lease = renewed
        await leases.release(lease)
        after = await leases.acquire("job", "worker-a", self.TTL)
        assert after is not None and after.generation > lease.generation

    async def test_keys_with_unusual_characters(self, leases: Leases) -> None:
        key = "child:ünïcødé/🚀 'quoted' \"double\" " + "k" * 300
        lease = await leases.acquire(key, "wörker 🦀", self.TTL)
        assert lease is not None
        assert await leases.current(key) == lease

    # -- durability ---------------------------------------------------------------

    @requires(Capability.SPANS_PROCESSES)
    async def test_state_is_shared_with_a_reopened_instance(
        self, leases: Leases, reopen: Callable[[], Leases], clock: FakeClock
    ) -> None:
        lease = await leases.acquire("job", "worker-a", self.TTL)
        assert lease is not None
        made: Any = reopen()
        other = getattr(made, "leases", made)  # a backend, or the leases themselves
        try:
            assert await other.current("job") == lease
            assert await other.acquire("job", "worker-b", self.TTL) is None
            await other.release(lease)
            successor = await other.acquire("job", "worker-b", self.TTL)
            assert successor is not None and successor.generation > lease.generation
            assert await leases.current("job") == successor
            assert await leases.renew(lease, self.TTL) is None
        finally:
            await _close(made)
