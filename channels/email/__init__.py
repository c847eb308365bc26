"""The email surface: its declaration (surface.py), its channel (channel.py), the pages its
links open, and templates/. Nothing is imported here, so reading the declaration loads no
SMTP client."""
