"""signoff: durable human approvals for AI agent tool calls."""
