"""The bench scenarios, a module each: DESCRIPTION (one line: what it answers),
add_arguments(parser) and run(args) -> bench.results.Results. `python -m bench` lists them."""
