"""The tracing front end: tracers, egad.numpy, control-flow combinators, egad.trace."""
