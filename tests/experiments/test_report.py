"""The sweep report's rendering: Markdown tables by tabulate, the HTML page by one Jinja2 template
with autoescaping, and the template shipped as package data. (A whole sweep with hostile names
is tests/spec/test_reliability.py::test_report_escapes_every_user_string.)"""

from __future__ import annotations

import configparser
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd

from wadiloco.experiments import report as R

ROOT = Path(__file__).resolve().parents[2]
NASTY = "<script>alert(1)</script> & 'q' \"d\" | $x$"


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


def _blocks():
    df = pd.DataFrame({"policy " + NASTY: [NASTY, None], "x": [-1.5, float("nan")], "y": ["0.00", "1"]})
    return [
        ("h1", NASTY),
        ("p", NASTY),
        ("ul", [NASTY, "plain"]),
        ("table", df),
        ("img", "figures/" + NASTY + ".png", NASTY),
        ("pre", NASTY),
    ]


def test_html_escapes_every_block_kind():
    page = R.render_html(NASTY, _blocks())
    p = _Tags()
    p.feed(page)
    assert set(p.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "p", "ul", "li", "table"} | {
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "img",
        "pre",
    }
    assert "script" not in p.tags and "<script>" not in page
    assert sorted(k for k, _ in p.attrs) == ["alt", "charset", "src"]  # the quote in alt ended nothing
    assert dict(p.attrs)["alt"] == NASTY  # escaped in the page, the text itself when read back
    text = "".join(p.text)
    assert text.count(NASTY) >= 6  # title, h1, p, li, the header cell (with its prefix), a cell, pre
    assert "n/a" in text and "-1.5" in text


def test_html_embeds_figures_it_can_read(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.png").write_bytes(b"\x89PNG fake")
    page = R.render_html("t", [("img", "figures/a.png", "a"), ("img", "figures/missing.png", "m")], tmp_path)
    assert "src='data:image/png;base64,iVBORyBmYWtl'" in page  # base64 of the bytes above
    assert "src='figures/missing.png'" in page


def test_markdown_tables_by_tabulate_stay_inert():
    md = R.render_md(_blocks())
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 4  # header, rule, two rows
    assert len({len(line) for line in table}) == 1  # tabulate pads every column to one width
    assert table[1].startswith("|:-")
    cells = [c.strip() for c in table[2].strip("|").split(" | ")]
    assert cells == ["&lt;script>alert(1)&lt;/script> &amp; 'q' \"d\" \\| \\$x\\$", "-1.5", "0.00"]
    assert [c.strip() for c in table[3].strip("|").split(" | ")] == ["n/a", "n/a", "1"]
    assert "<script>" not in md.split("```")[0]  # a fenced block (pre) is code, inert by itself


def test_template_ships_as_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    data = dict(cfg["options.package_data"])
    assert data["wadiloco.experiments"].strip() == "templates/*.j2, *.yaml"
    assert (ROOT / "experiments" / "templates" / R.TEMPLATE).is_file()
    assert any(line.strip().startswith("Jinja2") for line in cfg["options"]["install_requires"].splitlines())
