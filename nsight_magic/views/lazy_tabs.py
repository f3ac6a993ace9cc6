"""A Tab whose pages are built when first opened. A view shows one page at a time, and a
notebook editor waits for the whole widget before it shows any of it: building only the first
page at display takes the other pages' tables, charts and picker off every profiled cell (about
half of the %%nsys widget's time on a 3,600-kernel report; benchmarks/README.md, P5/P6)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as w

from .common import attempt, note_widget

PageBuilder = Callable[[], Sequence[Any]]
WAITING = "Built when this tab is first opened."


class LazyTabs:
    """``tab``: the Tab widget, one VBox per page holding one waiting line until that page is
    opened (selected in the front end, or ``page(title)``/``show(title)`` from code); then the
    VBox holds what its builder returned, or one line saying why it could not be built. The
    first page is built at once: it is what the view shows."""

    def __init__(
        self, builders: Mapping[str, PageBuilder], waiting: Mapping[str, str] | None = None
    ) -> None:
        """``waiting``: what a page shows until it is built (default ``WAITING``), which the
        front end shows while a slow page is being built."""
        self._builders = dict(builders)
        waiting = waiting or {}
        self._pages = {
            title: w.VBox([note_widget(waiting.get(title, WAITING))]) for title in self._builders
        }
        self._built: set[str] = set()
        self.tab = w.Tab(children=list(self._pages.values()), titles=list(self._pages))
        self.tab.observe(self._on_select, names="selected_index")
        if self._builders:
            self.page(next(iter(self._builders)))

    @property
    def titles(self) -> list[str]:
        return list(self._pages)

    def built(self, title: str) -> bool:
        """Whether page ``title`` has been built (opened) yet."""
        return title in self._built

    def page(self, title: str) -> Any:
        """Page ``title``'s VBox, built first if it was not (once: a page that failed to build
        keeps its line)."""
        box = self._pages[title]
        if title not in self._built:
            self._built.add(title)
            children, err = attempt(lambda: list(self._builders[title]()))
            box.children = children if err is None else [note_widget(f"{title} not shown: {err}")]
        return box

    def show(self, title: str) -> Any:
        """Build page ``title`` if needed and select it."""
        box = self.page(title)
        self.tab.selected_index = self.titles.index(title)
        return box

    def _on_select(self, change: Any) -> None:
        index = change.get("new")
        if isinstance(index, int) and 0 <= index < len(self._pages):
            self.page(self.titles[index])
