"""The fleet fixtures (real gateway processes on a fresh namespace) for these tests too."""

from tests.integration.fleet.conftest import fleet, namespace

__all__ = ["fleet", "namespace"]
