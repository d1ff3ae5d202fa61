"""A scenario's schema, its validation and its resolution: everything a run is made from, checked once."""
