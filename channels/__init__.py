"""One adapter per surface (Slack, Telegram, web). Channels depend on bot/, never the reverse."""
