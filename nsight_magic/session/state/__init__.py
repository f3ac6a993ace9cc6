"""The notebook's state and a worker's, by observation (issue 56): ``graph`` keys the objects
the two sides share, describes each shallowly and tells what changed since they last agreed,
so what a profiled cell did is seen, not guessed from its text."""
