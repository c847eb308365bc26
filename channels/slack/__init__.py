"""The Slack surface: its declaration (surface.py), its channel (channel.py) and the parts the
channel is made of. Nothing is imported here, so reading the declaration loads no SDK."""
