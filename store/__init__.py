"""Everything that speaks SQL. Nothing outside this package writes a statement."""
