"""The money path's Slurm records: strict parsers, on output recorded from each supported release."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.slurm import queries, records

REC = Path(__file__).parents[1] / "recorded"
RELEASES = sorted(p.name for p in REC.iterdir() if p.is_dir())


def test_both_supported_releases_have_recordings() -> None:
    assert RELEASES == ["22.05", "24.11", "26.05"]


@pytest.mark.parametrize("release", RELEASES)
def test_recorded_squeue_gives_a_gpu_record(release: str) -> None:
    found = records.from_squeue((REC / release / "squeue.txt").read_text())
    assert found, "no record parsed"
    r = found[0]
    assert r.job_id > 0 and r.submit > 1_700_000_000 and r.partition == "t4" and r.account == "vision"
    assert r.tres.get("gres/gpu") == "1" and r.time_limit == 60 and r.state == "RUNNING"


@pytest.mark.parametrize("release", RELEASES)
def test_recorded_sacct_gives_the_ended_run(release: str) -> None:
    found = records.from_sacct((REC / release / "sacct.txt").read_text())
    assert found, "no record parsed"
    r = found[-1]
    assert r.final and r.state == "COMPLETED" and r.start >= r.submit > 1_700_000_000
    assert r.cluster in ("yolo", "yolo2411", "yolo2605") and r.tres.get("gres/gpu") == "1" and r.time_limit == 60
    assert r.elapsed >= 0


@pytest.mark.parametrize("release", RELEASES)
def test_scontrol_prints_user_text_as_fields_which_is_why_billing_never_reads_it(release: str) -> None:
    """The recording is of a job submitted with --comment 'x TRES=cpu=1 TimeLimit=00:00:01'."""
    text = (REC / release / "scontrol_forged_comment.txt").read_text()
    assert " TimeLimit=00:00:01" in text and "TRES=cpu=1 " in text


SQ = "{id}|billing=1,cpu=1,gres/gpu=2,mem=256M,node=1|{limit}|1764489615|1764489617|t4|vision|normal|alice|0|RUNNING|"


@pytest.mark.parametrize(
    ("limit", "seconds"),
    [
        ("2:00", 120),
        ("1:02:03", 3723),
        ("1-00:00:00", 86400),
        ("UNLIMITED", None),
        ("5", 300),
        ("0:00", 0),
        ("364-23:59:59", 364 * 86400 + 86399),
        ("365-00:00:00", 365 * 86400),  # slurmctld's year for "no limit": held as the year it may run
        ("INVALID", records.PAST_A_YEAR),
    ],  # squeue's word for -t 400-0: sacct has it
)
def test_squeue_time_limits(limit: str, seconds: int | None) -> None:
    (r,) = records.from_squeue(SQ.format(id=7, limit=limit))
    assert r.time_limit == seconds and r.tres["gres/gpu"] == "2" and r.user == "alice"


@pytest.mark.parametrize(
    "line",
    [
        SQ.format(id=7, limit="2:00")[:-1],  # no closing delimiter: cut short
        SQ.format(id=7, limit="2:00") + "extra|",  # a field too many
        SQ.format(id="7_3", limit="2:00"),  # not a raw job id
        SQ.format(id="²", limit="2:00"),
        SQ.format(id=7, limit="2:00").replace("1764489615", "2026-11-30T10:00:15"),  # not epoch seconds
        SQ.format(id=7, limit="x:00"),
        SQ.format(id=7, limit="2:00").replace("|t4|", "|t4 TRES=x|"),
    ],
)
def test_squeue_lines_that_are_not_whole_records_are_refused(line: str) -> None:
    assert records.from_squeue(line) == []


SA = "{id}|yolo|1764489615|1764489616|1764489640|{state}|24|{limit}|t4|vision|normal|alice|billing=1,cpu=1,gres/gpu=1,mem=256M,node=1"


def test_sacct_states_and_limits() -> None:
    text = "\n".join(
        [
            SA.format(id=5, state="REQUEUED", limit="2"),
            SA.format(id=5, state="CANCELLED by 0", limit="UNLIMITED"),
            SA.format(id=6, state="RUNNING", limit="Partition_Limit"),
            SA.format(id=7, state="RUNNING", limit="525600"),
            SA.format(id=8, state="TIMEOUT", limit="576000"),
            SA.format(id=9, state="TIMEOUT", limit=""),
        ]
    )
    a, b, c, d, e, f = records.from_sacct(text)
    assert d.time_limit == 365 * 86400  # slurmctld's stand-in for no limit, held as the year it may run
    assert e.time_limit == 400 * 86400 and f.time_limit == 0  # -t 400-0; TimeLimit=0 prints nothing
    assert (a.state, a.final, a.time_limit, a.elapsed, a.start) == ("REQUEUED", True, 120, 24, 1764489616)
    assert (b.state, b.final, b.time_limit) == ("CANCELLED", True, None)
    assert (c.state, c.final) == ("RUNNING", False)


def test_sacct_refuses_malformed_lines() -> None:
    assert records.from_sacct(SA.format(id=5, state="COMPLETED", limit="2") + "|x") == []
    # what slurmdbd answers when a run's end reached it before its start: refused, never billed
    assert (
        records.from_sacct(
            "542|yolo|1796050593|1796050593|1796050596|COMPLETED|3||||Unknown|alice|billing=1,gres/shard=1"
        )
        == []
    )
    # ...and when it has the end state but not yet the end time: ElapsedRaw is still counting
    (counting,) = records.from_sacct(
        "728|yolo|1796051658|1796051658|Unknown|COMPLETED|10|1|t4|vision|normal|root|gres/gpu=1"
    )
    assert counting.state == "COMPLETED" and not counting.final
    assert records.from_sacct(SA.format(id=5, state="COMPLETED", limit="2").replace("|24|", "|2e1|")) == []


def test_queries_ask_only_for_fields_no_user_writes() -> None:
    user_text = {
        "Comment",
        "WorkDir",
        "StdOut",
        "StdErr",
        "JobName",
        "Name",
        "MailUser",
        "AdminComment",
        "Reason",
        "Constraints",
        "Features",
        "SystemComment",
        "Extra",
    }
    assert not user_text & set(queries.SQUEUE_FIELDS) and not user_text & set(queries.SACCT_FIELDS)
    assert queries.squeue_argv([3, 4])[:5] == ["squeue", "-h", "--states=all", "-j", "3,4"]
    with pytest.raises(ValueError):
        queries.job_list(["3;rm"])  # type: ignore[list-item]
