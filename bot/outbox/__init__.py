"""The transactional outbox: what a transition causes outside the database.

A transition queues its jobs in its own transaction (`jobs`); the runner (`runner`) performs
them later, from any replica, with retries: decision webhooks (`webhooks`), chat cards and
notices (`cards`), and what a delegation's start and end cause (`delegations`). The handler
table that maps each `JobKind` to its handler is built in one place,
`bot.bootstrap.outbox_handlers`.
"""
