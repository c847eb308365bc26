"""What more than one test module uses: rigs that start a signoff server and drive it, their
constants and config builders, and helpers that read what a surface sent. A test module
imports from here (or gets a fixture from its conftest.py), never from another test module;
tests/unit/test_test_layout.py checks that.
"""
