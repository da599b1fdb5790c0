from feedline.cli.main import main


def test_demo_runs_a_real_pipeline_and_restores_a_checkpoint(tmp_path, capsys):
    assert main(["demo", "--records", "3000", "--files", "3", "--batch-size", "256",
                 "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "wrote 3000 chess-position records" in out
    assert "one epoch: 3000 records in 12 batches" in out
    assert "produced the same next batch" in out
    assert len(list(tmp_path.glob("*.tfrecord"))) == 3


def test_version_prints_the_package_version(capsys):
    import pytest

    import feedline

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"feedline {feedline.__version__}\n"
