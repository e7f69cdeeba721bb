"""Test support users import, one module each: contract suites for their own
backends (`store_contract.StoreContract`, `lease_contract.LeaseContract`,
`background_contract.ActivityRegistryContract` and `NoticeInboxContract`,
`budget_contract.BudgetLedgerContract`,
`memory_contract.MemoriesContract`), a fake clock (`clock.FakeClock`), a
deterministic embedder for semantic memory search (`embedders.HashingEmbedder`), a
fake provider server (`fake_server.FakeServer`), a recording HTTP transport
for adapters (`transport.RecordingTransport`), and `recordings.recorded_model`
to record a real run once and replay it offline.

Each contract suite defines its interface: subclass it and provide fixtures
(see each module's docstring); tests of capabilities a backend does not
declare are skipped with the reason. The suites import pytest (the `testing`
extra), so they load only when asked for.
"""

__all__: list[str] = []
