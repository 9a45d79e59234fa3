"""`megarl view --out`: the page loaded in real headless Chromium, selected through the URL hash; the test reads the
rendered DOM (plotly's curves, the sample's stages, heat strips, the validation table) and takes a screenshot into
test-artifacts/view.png."""

import html
import json
import math
import re
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from megarl.cli import main
from megarl.view.server import ViewHandler
from tests.helpers import CHROMIUM, chromium

REPO_ROOT = Path(__file__).resolve().parents[3]
TRAIN_STEPS = (1, 2, 3, 4, 5)
VAL_STEPS = (0, 3, 5)
SAMPLES_PER_STEP = 3
VAL_SAMPLES = 2
PANELS = ("reward", "kl", "entropy", "response_length", "grad_norm", "timing", "memory", "health")
STRIPS = ("values", "advantages", "returns", "log_ratio", "ref_kl", "entropy")
STAGES = ("stage-prompt", "stage-response", "stage-reward", "stage-tokens", "stage-update")


def write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def step_metrics(step: int) -> dict:
    metrics = {
        "critic/score/mean": 0.2 * step, "critic/rewards/mean": 0.2 * step - 0.01, "actor/ppo_kl": 0.001 * step,
        "actor/kl_loss": 0.002 * step, "actor/entropy": 1.5 - 0.1 * step, "response_length/mean": 40.0 + step,
        "response_length/max": 64.0, "actor/grad_norm": 1.0 / step, "critic/grad_norm": 2.0 / step,
        "actor/pg_loss": -0.01 * step, "critic/vf_loss": 0.5 / step, "timing_s/step": 10.0 + step,
        "timing_s/gen": 6.0, "memory/gpu_allocated_gb": 12.5, "perf/max_memory_allocated_gb": 20.0,
        "health/grad_norm": 0.0, "actor/pg_clipfrac": math.nan if step == 2 else 0.1,
    }
    if step in VAL_STEPS:
        metrics["val-core/synthetic/arithmetic/acc/mean"] = 0.3 + 0.1 * step
    return metrics


def response(step: int, index: int) -> tuple[list[str], str, int]:
    """(tokens, the answer text, the answer's character offset) of one sample's response."""
    answer = str(step * 10 + index)
    tokens = ["Let", "'s", " think", "."] * (index + 1) + ["\n", "The", " answer", " is", " ", answer]
    return tokens, answer, len("".join(tokens[:-1]))


def train_sample(step: int, index: int) -> dict:
    tokens, answer, start = response(step, index)
    n = len(tokens)
    old = [-0.5 - 0.01 * i for i in range(n)]
    sample = {
        "step": step, "index": index, "uid": f"{step}-{index}", "data_source": "synthetic/arithmetic",
        "input": f"Step {step} prompt {index}: <b>what</b> is {step} * 10 + {index}? </script>",
        "output": "".join(tokens), "gts": answer, "answer": {"text": answer, "start": start, "end": start + len(answer)},
        "score": 1.0, "acc": 1.0, "reward": 0.98, "finish_reason": "stop", "response_length": n, "tokens": tokens,
        "rollout_log_probs": [x + 0.01 * math.sin(i) for i, x in enumerate(old)], "old_log_probs": old,
        "advantages": [0.7 - 0.1 * index] * n, "returns": [0.5] * n,
    }
    if index > 0:  # a critic and a reference model on all but the first sample: strips appear only when logged
        sample.update(ref_log_prob=[x - 0.02 * math.cos(i) for i, x in enumerate(old)],
                      values=[math.sin(i) for i in range(n)], entropy=[0.1 * (i % 5) for i in range(n)],
                      rm_score=0.75, rule_score=1.0)
    if index == 0:  # judged by an LLM (reward.judge): its output parses at odd steps
        sample.update(judge_score=7.0 if step % 2 else 0.0, rule_score=1.0,
                      judge={"prompt": f"<|im_start|>user\nRate <this> answer of step {step}",
                             "output": "I rate it 7" if step % 2 else "I cannot say", "parsed": bool(step % 2)})
    if index == 2:  # a multi-turn sample: a call, the tool's result, the answer
        sample.update(turns=[{"by": "model", "text": "<tool_call>{...}</tool_call>"},
                             {"by": "tool", "text": "<tool_response>42</tool_response>"},
                             {"by": "model", "text": "".join(tokens)}],
                      agent={"assistant_turns": 2, "tool_calls": 1, "tool_errors": 0, "tool_timeouts": 0})
    return sample


def val_sample(step: int, index: int) -> dict:
    tokens, answer, start = response(step, index)
    gts = str(VAL_STEPS[-1] * 10 + index)  # the last validation answers right
    right = answer == gts
    return {
        "step": step, "index": index, "uid": f"val-{index}", "data_source": "synthetic/arithmetic",
        "input": f"Validation prompt {index}", "output": "".join(tokens), "gts": gts,
        "answer": {"text": answer, "start": start, "end": start + len(answer)}, "score": float(right),
        "acc": float(right), "finish_reason": "stop", "response_length": len(tokens),
    }


def write_run(run_dir: Path, config: bool = True, samples: bool = True) -> Path:
    """A small finished run: metrics.jsonl (step 0 validation only), and train and validation sample files."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if config:
        (run_dir / "config.yaml").write_text("trainer:\n  experiment_name: view-test\n  rollout_data_dir: null\n"
                                             "  validation_data_dir: null\n")
    rows = [{"step": 0, "val-core/synthetic/arithmetic/acc/mean": 0.3}]
    rows += [{"step": step, **step_metrics(step)} for step in TRAIN_STEPS]
    write_jsonl(run_dir / "metrics.jsonl", rows)
    if samples:
        for step in TRAIN_STEPS:
            write_jsonl(run_dir / "samples" / "train" / f"{step}.jsonl",
                        [train_sample(step, index) for index in range(SAMPLES_PER_STEP)])
            (run_dir / "samples" / "train" / f"{step}.metrics.json").write_text(json.dumps(step_metrics(step)))
        for step in VAL_STEPS:
            write_jsonl(run_dir / "samples" / "val" / f"{step}.jsonl",
                        [val_sample(step, index) for index in range(VAL_SAMPLES)])
    return run_dir


def section(dom: str, element_id: str) -> str:
    """The DOM text from the element with `element_id` up to the next element with one of the page's known ids."""
    start = dom.index(f'id="{element_id}"')
    ends = [dom.find(f'id="{other}"', start + 1) for other in (*STAGES, "validation", *(f"panel-{p}" for p in PANELS))]
    return dom[start:min([end for end in ends if end > start] or [len(dom)])]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    tmp = tmp_path_factory.mktemp("view")
    out = tmp / "page.html"
    assert main(["view", str(write_run(tmp / "run")), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def dom(page, tmp_path_factory) -> str:
    url = page.as_uri() + "#step=3&sample=1&val=0"
    return chromium(tmp_path_factory.mktemp("chromium"), url, "--dump-dom").stdout


def test_plotly_draws_one_figure_per_panel(dom):
    drawn = re.findall(r'id="panel-([a-z_]+)"', dom)
    assert tuple(drawn) == PANELS
    for panel in PANELS:
        assert 'class="main-svg"' in section(dom, f"panel-{panel}"), panel
    assert "critic/score/mean" in section(dom, "panel-reward")
    assert "val-core/synthetic/arithmetic/acc/mean" in section(dom, "panel-reward")


def test_the_hash_selects_the_sample_and_its_stages_come_in_order(dom):
    positions = [dom.index(f'id="{stage}"') for stage in STAGES]
    assert positions == sorted(positions)
    sample = train_sample(3, 1)
    prompt = section(dom, "stage-prompt")
    assert html.escape(sample["input"], quote=False) in prompt and "<b>what</b>" not in prompt
    assert '<mark class="answer">31</mark>' in section(dom, "stage-response")
    reward = section(dom, "stage-reward")
    assert all(text in reward for text in ("ground truth", "31", "reward (after KL)", "0.98"))
    assert "reward model's score</th><td>0.75" in reward.replace("&#39;", "'")


def test_a_judged_sample_shows_the_judges_prompt_output_and_score(page, tmp_path):
    dom = chromium(tmp_path, page.as_uri() + "#step=3&sample=0", "--dump-dom").stdout
    reward = section(dom, "stage-reward").replace("&#39;", "'")
    assert "judge's score</th><td>7</td>" in reward and "rule score</th><td>1</td>" in reward
    assert "reward model's score" not in reward
    assert html.escape("<|im_start|>user\nRate <this> answer of step 3", quote=False) in reward
    assert "judge's output</div>" in reward and "I rate it 7" in reward
    unparsed = section(chromium(tmp_path, page.as_uri() + "#step=2&sample=0", "--dump-dom").stdout, "stage-reward")
    assert "judge's output · did not parse" in unparsed.replace("&#39;", "'") and "I cannot say" in unparsed


def test_heat_strips_have_one_span_per_response_token(dom):
    sample = train_sample(3, 1)
    tokens = section(dom, "stage-tokens")
    for strip in STRIPS:
        found = re.search(rf'<div class="strip" id="strip-{strip}">(.*?)</div>', tokens)
        assert found, strip
        spans = re.findall(r'<span title="([^"]*)"', found.group(1))
        assert len(spans) == sample["response_length"], strip
    advantage_titles = re.findall(r'<span title="([^" ]*)', re.search(r'id="strip-advantages">(.*?)</div>',
                                                                      tokens).group(1))
    assert {float(title) for title in advantage_titles} == {0.6}
    assert 'style="background: rgba(220, 38, 38, 0.85);"' in tokens  # positive at the strip's max: full red


def test_a_multi_turn_response_shows_its_turns_and_marks_the_tool_tokens_untrained(page, tmp_path):
    dom = chromium(tmp_path, page.as_uri() + "#step=3&sample=2", "--dump-dom").stdout
    response = section(dom, "stage-response")
    assert response.count('class="turn turn-model"') == 2 and response.count('class="turn turn-tool"') == 1
    assert "tool · not trained (masked)" in response
    assert html.escape("<tool_response>42</tool_response>") in response
    assert "2 model turns · 1 tool calls, 0 errors, 0 timeouts" in response


def test_update_statistics_are_the_steps_actor_and_critic_metrics(dom):
    table = section(dom, "stage-update")
    assert 'id="update-table"' in table
    for name in ("actor/ppo_kl", "actor/grad_norm", "critic/vf_loss", "critic/score/mean"):
        assert f"<th>{name}</th>" in table
    assert "<td>0.003</td>" in table  # actor/ppo_kl at step 3
    assert "timing_s/step" not in table


def test_validation_table_has_a_column_per_validated_step(dom):
    table = section(dom, "validation")
    assert re.findall(r'<th class="val-step">step (\d+)</th>', table) == [str(step) for step in VAL_STEPS]
    assert table.count('<mark class="answer">') == len(VAL_STEPS)
    assert "Validation prompt 0" in table


def test_choosing_a_step_updates_the_hash(page, tmp_path):
    """A script appended to the page picks step 4 as a user would, then writes location.hash into the DOM."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", """<script>
const picker = document.getElementById("step-picker");
picker.value = "4";
picker.dispatchEvent(new Event("change"));
document.body.append(Object.assign(document.createElement("output"), {id: "hash", textContent: location.hash}));
</script></body>"""))
    dom = chromium(tmp_path, probe.as_uri() + "#sample=2", "--dump-dom").stdout
    assert '<output id="hash">#step=4&amp;sample=2&amp;val=0</output>' in dom
    assert "Step 4 prompt 2:" in section(dom, "stage-prompt")


def test_screenshot(page, tmp_path):
    artifacts = REPO_ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    png = artifacts / "view.png"
    png.unlink(missing_ok=True)
    chromium(tmp_path, page.as_uri() + "#step=3&sample=1&val=0", f"--screenshot={png}", "--window-size=1400,2400")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 50_000


def test_the_served_page_fetches_a_live_runs_new_steps(tmp_path):
    """The run gains step 6 right after the page is served: only the page's own re-fetch of data.json shows it."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    run = write_run(tmp_path / "run")

    class StepAfterPage(ViewHandler):
        directory = run

        def do_GET(self):
            super().do_GET()
            if self.path == "/":
                with open(run / "metrics.jsonl", "a") as f:
                    f.write(json.dumps({"step": 6, "critic/score/mean": 0.33}) + "\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), StepAfterPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dom = chromium(tmp_path, f"http://127.0.0.1:{server.server_address[1]}/#step=3", "--dump-dom").stdout
    finally:
        server.shutdown()
        server.server_close()
    summary = dom[dom.index('id="summary"'):dom.index('id="curves"')]
    assert "last step 6" in summary and "critic/score/mean 0.33" in summary
