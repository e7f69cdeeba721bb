"""Test support users import, one module each: contract suites for their own
backends (`store_contract.StoreContract`, `lease_contract.LeaseContract`,
`background_contract.ActivityRegistryContract` and `NoticeInboxContract`,
`budget_contract.BudgetLedgerContract`), a fake clock (`clock.FakeClock`), a
fake provider server (`fake_server.FakeServer`), a recording HTTP transport
for adapters (`transport.RecordingTransport`), and `recordings.recorded_model`
to record a real run once and replay it offline.

Each contract suite is the definition of its interface: subclass it and
provide fixtures (see each module's docstring). A backend declares its
capabilities (`taskloom.backends.Capability`), and the suites skip, with the
reason, the tests of capabilities it does not declare
(`taskloom.testing.capabilities`). The suites import pytest (the `testing`
extra: `pip install 'taskloom[testing]'`), so they load only when asked for.
"""

__all__: list[str] = []
