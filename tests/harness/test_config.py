"""Settings combine as users expect: defaults, then the file, then the flags given, then key=value
overrides; errors name the field; --print-config reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.config import ConfigError, load_config
from harness.rollouts.config import RolloutConfig, host_concurrency
from harness.training.train import TrainConfig


def test_config_overrides_and_errors_name_the_field(tmp_path: object) -> None:
    config = load_config(RolloutConfig, None, ["summary.trigger_tokens=2048", "sampling.temperature=0.7"])
    assert config.summary.trigger_tokens == 2048 and config.sampling.temperature == 0.7
    with pytest.raises(ConfigError, match=r"summary.trigger_tokns: Extra inputs are not permitted"):
        load_config(RolloutConfig, None, ["summary.trigger_tokns=5"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(RolloutConfig, None, ["oops"])
    with pytest.raises(ConfigError, match="group_size"):
        load_config(RolloutConfig, None, ["group_size=0"])


def test_flags_beat_the_file_sections_merge_and_overrides_beat_both(tmp_path: Path) -> None:
    """`--group-size 8 --backend bwrap` with a file holding `group_size: 4` and a `sandbox:` section gave
    group_size 4 and backend auto (issue 17): the file was applied over the flags, section by section."""
    file = tmp_path / "rollout.yaml"
    file.write_text("group_size: 4\nconcurrency: 3\nsandbox:\n  cpus: 2.0\n  backend: docker\n")
    flags = {"group_size": 8, "sandbox": {"backend": "bwrap"}}

    config = load_config(RolloutConfig, file, [], flags)
    assert (config.group_size, config.concurrency) == (8, 3)
    assert (config.sandbox.backend, config.sandbox.cpus) == ("bwrap", 2.0)

    overridden = load_config(RolloutConfig, file, ["group_size=6", "sandbox.backend=docker"], flags)
    assert (overridden.group_size, overridden.sandbox.backend, overridden.sandbox.cpus) == (6, "docker", 2.0)
    assert flags == {"group_size": 8, "sandbox": {"backend": "bwrap"}}  # the caller's flags are left as given


def test_print_config_gives_the_resolved_settings_as_a_file_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main
    from harness.training.train import TrainConfig

    file = tmp_path / "rollout.yaml"
    file.write_text("group_size: 4\nsandbox:\n  cpus: 2.0\n")
    args = ["rollout", "--config", str(file), "--group-size", "8", "--backend", "bwrap", "--print-config"]
    assert main([*args, "summary.trigger_tokens=2048"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    config = load_config(RolloutConfig, printed, [])
    assert (config.group_size, config.sandbox.backend, config.sandbox.cpus) == (8, "bwrap", 2.0)
    assert config.summary.trigger_tokens == 2048
    assert config == load_config(
        RolloutConfig,
        file,
        ["summary.trigger_tokens=2048"],
        {"group_size": 8, "sandbox": {"backend": "bwrap"}},
    )

    assert main(["train", "--print-config", "model=no-such-folder", "steps=3"]) == 0  # printed, not run
    train = TrainConfig.model_validate(yaml.safe_load(capsys.readouterr().out))
    assert (train.steps, str(train.model)) == (3, "no-such-folder")


def test_a_training_config_nests_the_rollout_settings_and_reads_the_older_flat_form(tmp_path: Path) -> None:
    """TrainConfig holds a RolloutConfig (no copied fields); a config.yaml written before that, with the
    rollout settings at the top level, reads to the same settings, and so do flat `key=value` overrides."""
    from harness.inspection.runs import load_setup
    from harness.training.train import TrainConfig

    nested = {
        "model": "m",
        "steps": 2,
        "rollout": {"suite": "demo", "group_size": 8, "sandbox": {"cpus": 2.0}},
    }
    flat = {"model": "m", "steps": 2, "suite": "demo", "group_size": 8, "sandbox": {"cpus": 2.0}}
    config = TrainConfig.model_validate(nested)
    assert isinstance(config.rollout, RolloutConfig)
    assert TrainConfig.model_validate(flat) == config
    assert (config.rollout.group_size, config.rollout.sandbox.cpus, config.rollout.out) == (
        8,
        2.0,
        Path("runs/train"),
    )
    assert config.rollout.policy == "hf:m"  # the learner's weights sample
    assert load_config(TrainConfig, None, ["model=m", "rollout.group_size=6"]).rollout.group_size == 6
    assert load_config(TrainConfig, None, ["model=m", "group_size=6"]).rollout.group_size == 6
    assert TrainConfig(model=Path("m")).rollout.group_size == 4  # the training default, not a rollout's 1
    with pytest.raises(ValueError, match="at least 2"):
        TrainConfig.model_validate({"model": "m", "rollout": {"group_size": 1}})
    written = config.model_dump(mode="json")  # what a run's config.yaml holds
    older = {**{k: v for k, v in written.items() if k != "rollout"}, **written["rollout"]}
    older.pop("policy")
    for name, data in (("nested", written), ("flat", older)):  # both run folders read back
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text(yaml.safe_dump(data))
        assert load_setup(run).suite == "demo"
        assert TrainConfig.model_validate(data) == config


def test_the_tools_settings_are_part_of_a_run_and_older_bash_enabled_still_reads(tmp_path: Path) -> None:
    """`tools` is a section of the rollout settings (its limits set from a file or `key=value`); a config
    written when `bash_enabled` was a loop setting reads into `tools.bash_enabled`."""
    from harness.inspection.runs import load_setup

    config = load_config(
        RolloutConfig, None, ["tools.max_observation_chars=5000", "tools.bash_enabled=false"]
    )
    assert (config.tools.max_observation_chars, config.tools.bash_enabled) == (5000, False)
    older = RolloutConfig().model_dump(mode="json")
    older["loop"]["bash_enabled"] = False
    del older["tools"]
    assert RolloutConfig.model_validate(older).tools.bash_enabled is False
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(older))
    assert load_setup(tmp_path).tools.bash_enabled is False


def test_a_mistyped_key_gets_the_nearest_real_one() -> None:
    from harness.training.train import TrainConfig

    with pytest.raises(
        ConfigError, match=r"grop_size: Extra inputs are not permitted \(did you mean group_size\?\)"
    ):
        load_config(RolloutConfig, None, ["grop_size=4"])
    with pytest.raises(ConfigError, match=r"sandbox.backnd: .* \(did you mean sandbox.backend\?\)"):
        load_config(RolloutConfig, None, ["sandbox.backnd=bwrap"])
    with pytest.raises(
        ConfigError, match=r"rollout.sampling.temprature: .* \(did you mean rollout.sampling.temperature\?\)"
    ):
        load_config(TrainConfig, None, ["model=m", "rollout.sampling.temprature=0.5"])
    with pytest.raises(ConfigError) as nothing_near:
        load_config(RolloutConfig, None, ["zzzz=1"])
    assert "did you mean" not in str(nothing_near.value)


def test_print_config_explains_every_setting_in_a_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each setting is printed after its docstring as a comment, nested sections too, and the file reads
    back to the same settings."""
    from harness.cli import main
    from harness.config import field_docs
    from harness.training.train import TrainConfig

    assert main(["train", "--print-config", "model=m", "rollout.group_size=6"]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    for section, model in (("", TrainConfig), ("  ", RolloutConfig)):
        docs = field_docs(model)
        for name in model.model_fields:
            at = lines.index(next(line for line in lines if line.startswith(f"{section}{name}:")))
            comment = " ".join(
                line.strip().removeprefix("# ") for line in lines[:at][-8:] if line.strip().startswith("#")
            )
            assert " ".join(docs[name].split())[:40] in comment, name
    (tmp_path / "printed.yaml").write_text(printed)
    assert load_config(TrainConfig, tmp_path / "printed.yaml", []) == load_config(
        TrainConfig, None, ["model=m", "rollout.group_size=6"]
    )


def test_a_typo_on_the_command_line_is_blamed_on_the_override_not_the_file(tmp_path: Path) -> None:
    """`train --config examples/train.yaml grop_size=4` said `config examples/train.yaml: grop_size: Extra
    inputs are not permitted`, with no suggestion (issue 34, item 6): the key lives in `rollout`."""
    from harness.training.train import TrainConfig

    file = tmp_path / "train.yaml"
    file.write_text("model: m\nsteps: 2\nlearnr:\n  lr: 0.1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(TrainConfig, file, ["grop_size=4"])
    said = str(caught.value)
    assert f"config {file}: learnr: Extra inputs are not permitted (did you mean learner?)" in said
    assert (
        "override 'grop_size=4': grop_size: Extra inputs are not permitted (did you mean rollout.group_size?)"
        in said
    )
    assert f"config {file}: grop_size" not in said


def test_episodes_at_once_default_to_the_hosts_share_for_a_sampled_policy(tmp_path: Path) -> None:
    """A policy sampled from a model gets `host_concurrency()` episodes at once (enough to keep a batching
    sampler's batch full), however the settings come; a scripted one, with no sampler to fill, keeps 2;
    a value given wins."""
    model = tmp_path / "model"
    assert load_config(RolloutConfig, None, [f"policy=hf:{model}"]).concurrency == host_concurrency()
    assert (
        load_config(RolloutConfig, None, [], {"policy": "tito:m@http://h/v1"}).concurrency
        == host_concurrency()
    )
    assert load_config(RolloutConfig, None, []).concurrency == 2  # scripted:gold
    assert load_config(RolloutConfig, None, [f"policy=hf:{model}", "concurrency=3"]).concurrency == 3
    assert TrainConfig(model=model).rollout.concurrency == host_concurrency()
    assert TrainConfig.model_validate({"model": model, "script": "gold-or-decoy"}).rollout.concurrency == 2
    assert TrainConfig.model_validate({"model": model, "concurrency": 5}).rollout.concurrency == 5
    assert 4 <= host_concurrency() <= 16
