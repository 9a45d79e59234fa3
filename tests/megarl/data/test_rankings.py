"""`megarl sample-rankings`: the four grades and the ranking rows built from sampled responses."""

from megarl.data.rankings import grade, ranking_rows


def test_grades_put_the_graded_format_first_then_the_right_answer():
    assert grade("#### 7", "7") == 3
    assert grade("#### 8", "7") == 2
    assert grade("= 7", "7") == 1
    assert grade("= 8", "7") == 0 and grade("no answer", "7") == 0
    assert grade("#### 1,234", "1234") == 3


def test_a_prompt_whose_samples_reach_k_grades_becomes_a_best_first_ranking():
    row = {"prompt": [{"role": "user", "content": "3+4="}], "data_source": "synthetic/arithmetic",
           "reward_model": {"ground_truth": "7"}}
    sampled = ["= 8", "#### 7", "= 7", "#### 7", "#### 9", "x"]
    [ranking] = ranking_rows([row], [sampled], k=4)
    assert ranking["responses"] == ["#### 7", "#### 9", "= 7", "= 8"]  # the first sample of each grade
    assert ranking["prompt"] == row["prompt"] and ranking["reward_model"] == row["reward_model"]
    assert ranking_rows([row], [sampled], k=2)[0]["responses"] == ["#### 7", "#### 9"]
    assert ranking_rows([row], [["#### 7", "= 7", "#### 7"]], k=4) == []  # two grades only
