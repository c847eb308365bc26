"""The web surface: its declaration (surface.py), its channel (channel.py), its pages, and
their templates/ and static/. Nothing is imported here, so reading the declaration loads no
Jinja2."""
