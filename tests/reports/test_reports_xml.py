"""The JUnit and HTML reports parsed by real parsers: XML well-formedness, suite counts, SVG
validity, balanced HTML, strict JSON."""
import html.parser
import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import SAMPLES

# (tests, failures) per sample: one testcase per tap class (nine in the samples) + the verdict.
JUNIT_COUNTS = {"passing": (10, 0), "diverged": (10, 9), "incompatible": (1, 1), "hostile": (10, 2)}
HOSTILE_TAP = "blk.1.attn_q<&>\"'"


@pytest.mark.parametrize("sample", SAMPLES)
def test_junit_counts_match_testcases(out, sample):
    root = ET.parse(out / f"{sample}.xml").getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1 and suites[0].get("name") == "tapdiff"
    suite = suites[0]
    cases = suite.findall("testcase")
    failing = [c for c in cases if c.find("failure") is not None]
    tests, failures = JUNIT_COUNTS[sample]
    assert (int(suite.get("tests")), int(suite.get("failures"))) == (tests, failures)
    assert (len(cases), len(failing)) == (tests, failures)
    assert (root.get("tests"), root.get("failures")) == (suite.get("tests"), suite.get("failures"))
    assert [c.get("name") for c in cases].count("verdict") == 1
    for case in failing:
        assert case.find("failure").get("message")


def test_junit_failure_names_first_tap_and_position(out):
    suite = ET.parse(out / "diverged.xml").getroot().find("testsuite")
    by_name = {c.get("name"): c for c in suite.findall("testcase")}
    message = by_name["attention"].find("failure").get("message")
    assert message.startswith("blk.0.attn.probs diverged at position 8: nmse ")
    assert "first divergence of the run" in message
    assert by_name["embedding"].find("failure") is None
    verdict = by_name["verdict"].find("failure")
    assert verdict.get("type") == "diverged"
    assert "DIVERGED  blk.0.attn.probs at position 8" in verdict.text


def test_junit_round_trips_hostile_names(out):
    suite = ET.parse(out / "hostile.xml").getroot().find("testsuite")
    by_name = {c.get("name"): c for c in suite.findall("testcase")}
    message = by_name["projection"].find("failure").get("message")
    assert message.startswith(HOSTILE_TAP + " diverged at position 3: nmse nan")
    assert "12 non-finite values" in message
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["expected"] == "/tmp/we<i>rd & \"trace\" 'x'.h5"


class _Balance(html.parser.HTMLParser):
    """Checks that every non-void element is closed in order."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "rect", "line", "circle", "stop",
            "path"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


@pytest.mark.parametrize("sample", SAMPLES)
def test_html_is_balanced_and_its_svgs_are_xml(out, sample):
    text = (out / f"{sample}.html").read_text(encoding="utf-8")
    checker = _Balance()
    # SVG shapes may be written <rect ...>...</rect> (with a <title>) or self-closed.
    checker.VOID = checker.VOID - {"rect", "circle"}
    checker.feed(text)
    checker.close()
    assert checker.errors == [] and checker.stack == []
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    assert len(svgs) >= (0 if sample == "incompatible" else 3)  # legend + two heatmaps (+ KL)
    for svg in svgs:
        ET.fromstring(svg)
    heatmaps = [s for s in svgs if 'class="heatmap"' in s]
    assert len(heatmaps) == (0 if sample == "incompatible" else 2)


@pytest.mark.parametrize("sample", SAMPLES)
def test_json_is_strict(out, sample):
    def reject(constant):
        raise ValueError(f"non-JSON constant {constant}")

    doc = json.loads((out / f"{sample}.json").read_text(encoding="utf-8"), parse_constant=reject)
    assert doc["schema"] == "tapdiff-report" and doc["schema_version"] == 1
