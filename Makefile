# Convenience targets; the README's two commands work without make.
.PHONY: install demo test slow lint bench

install:
	pip install -c constraints.txt -e '.[dev,learners]'

demo:
	shiftwatch demo

test:
	python -m pytest

slow:
	python -m pytest -m slow

lint:
	ruff check .

bench:
	for f in benchmarks/*.py; do echo "== $$f"; python "$$f" || exit 1; done
