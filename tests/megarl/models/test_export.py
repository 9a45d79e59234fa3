from megarl.models.export import main


def test_export_refuses_to_overwrite_a_model_unless_forced(tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}")
    assert main(["--checkpoint", str(tmp_path / "absent"), "--out", str(out)]) == 2
    assert f"--out {out} already holds a model (config.json)" in capsys.readouterr().err
    # --force goes on to the checkpoint, and a checkpoint that cannot load leaves the old model as it was
    assert main(["--checkpoint", str(tmp_path / "absent"), "--out", str(out), "--force"]) == 2
    assert "is not a megarl model checkpoint" in capsys.readouterr().err
    assert (out / "config.json").read_text() == "{}"
