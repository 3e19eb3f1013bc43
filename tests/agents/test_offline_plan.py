import json

import pytest

from agents.offline_plan import (
    DEFAULT_PATH,
    DEFAULT_SUBJECT,
    MAX_WAIT_SECONDS,
    CheckpointSpec,
    Plan,
    PlannedStep,
    place_checkpoints,
    plan_task,
)


def tools(plan: Plan) -> list[str]:
    return [step.tool for step in plan.steps]


def only_step(description: str) -> PlannedStep:
    plan = plan_task(description)
    assert plan.unrecognised == ()
    assert len(plan.steps) == 1
    return plan.steps[0]


# --- send_email -------------------------------------------------------------


def test_send_email_with_subject_and_body() -> None:
    step = only_step('Send an email to Alice@Example.com with subject "Status" and body "All green."')
    assert step == PlannedStep(
        tool="send_email",
        args={"to": "alice@example.com", "subject": "Status", "body": "All green."},
        instruction='Send an email to Alice@Example.com with subject "Status" and body "All green."',
    )


@pytest.mark.parametrize(
    "description",
    [
        'send an e-mail to bob@example.org saying "hello"',
        'Send a mail to bob@example.org that says "hello"',
        'Send a message to bob@example.org with body "hello"',
        'Email bob@example.org: "hello"',
        "send email to bob@example.org saying hello",
    ],
)
def test_send_email_body_forms(description: str) -> None:
    step = only_step(description)
    assert step.tool == "send_email"
    assert step.args == {"to": "bob@example.org", "subject": DEFAULT_SUBJECT, "body": "hello"}


def test_send_email_subject_default_is_a_label() -> None:
    step = only_step('Send an email to ops@example.com saying "deploy done".')
    assert step.instruction == 'Send an email to ops@example.com saying "deploy done"'
    assert step.args == {"to": "ops@example.com", "subject": "Message from Vouch", "body": "deploy done"}


@pytest.mark.parametrize(
    "description",
    [
        "Send an email to ops@example.com.",
        'Send an email to ops@example.com with subject "Status"',
        "Write an email to a@x.com",
        "Email the summary to a@x.com",
        "Send the report to a@x.com",
    ],
)
def test_email_without_a_body_is_unrecognised(description: str) -> None:
    # The body would be made up: the agent never writes text the task does not give.
    plan = plan_task(description)
    assert plan.steps == ()
    assert plan.unrecognised == (description.rstrip("."),)


def test_multiple_recipients_give_one_step_each() -> None:
    plan = plan_task('Send an email to a@x.com and B@Y.com, and c@z.co.uk with subject "Hi" saying "hello"')
    assert [s.args["to"] for s in plan.steps] == ["a@x.com", "b@y.com", "c@z.co.uk"]
    assert {s.args["subject"] for s in plan.steps} == {"Hi"}
    assert plan.unrecognised == ()


def test_duplicate_recipients_are_sent_once() -> None:
    plan = plan_task('Email a@x.com and A@X.com saying "x"')
    assert [s.args["to"] for s in plan.steps] == ["a@x.com"]


def test_email_without_valid_address_is_unrecognised() -> None:
    plan = plan_task('Send an email to bob saying "x". Send a message to carol@localhost saying "y"')
    assert plan.steps == ()
    assert plan.unrecognised == ('Send an email to bob saying "x"', 'Send a message to carol@localhost saying "y"')


def test_address_inside_quoted_body_is_not_a_recipient() -> None:
    step = only_step('Send an email to a@x.com saying "cc b@y.com please"')
    assert step.args["to"] == "a@x.com"
    assert step.args["body"] == "cc b@y.com please"


def test_unquoted_body_runs_to_clause_end_and_hides_addresses() -> None:
    step = only_step("Send an email to a@x.com saying ask b@y.com, see you then")
    assert step.args["to"] == "a@x.com"
    assert step.args["body"] == "ask b@y.com, see you then"


def test_write_an_email_is_sending() -> None:
    assert only_step('Write an email to a@x.com saying "hi"').tool == "send_email"


# --- write_file -------------------------------------------------------------


def test_write_note_defaults() -> None:
    step = only_step('Write a note saying "hello"')
    assert step.tool == "write_file"
    assert step.args == {"path": DEFAULT_PATH, "content": "hello"}
    assert DEFAULT_PATH == "notes.md"


@pytest.mark.parametrize(
    "description", ["Write a note", 'Write a file named "todo.md"', "Save a note to drafts/today.md", "Create a memo"]
)
def test_note_without_text_is_unrecognised(description: str) -> None:
    # The note's text would be made up.
    assert plan_task(description) == Plan(steps=(), unrecognised=(description,))


@pytest.mark.parametrize(
    ("description", "path", "content"),
    [
        ('Write a note named "todo.md" saying "buy milk"', "todo.md", "buy milk"),
        ('Save a file called report.txt with "Done. Really."', "report.txt", "Done. Really."),
        ("create a file results.csv containing a,b", "results.csv", "a,b"),
        ('Write a file with "x = 1"', "notes.md", "x = 1"),
        ('Create the document "hello" in "greeting.txt"', "greeting.txt", "hello"),
        ("Save a note saying see notes.txt", "notes.md", "see notes.txt"),
    ],
)
def test_write_file_forms(description: str, path: str, content: str) -> None:
    step = only_step(description)
    assert step.tool == "write_file"
    assert step.args == {"path": path, "content": content}


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("../../etc/passwd", "_._etc_passwd"),
        ("/abs/path.txt", "_abs_path.txt"),
        (".hidden", "hidden"),
        ("my report (final).md", "my_report__final_.md"),
        ("...", "notes.md"),
        ("a..b.txt", "a.b.txt"),
    ],
)
def test_file_names_are_sanitised(name: str, path: str) -> None:
    step = only_step(f'Write a file named "{name}" saying "x"')
    assert step.args["path"] == path
    assert "/" not in step.args["path"] and ".." not in step.args["path"]


def test_bare_path_with_slashes_is_sanitised() -> None:
    assert only_step("Save a note to drafts/today.md saying x").args["path"] == "drafts_today.md"


def test_unknown_write_target_is_unrecognised() -> None:
    assert plan_task("Create a database").unrecognised == ("Create a database",)


# --- summarise and wait ------------------------------------------------------


@pytest.mark.parametrize(
    "description",
    ["Summarise the results", "summarize everything", "Sum up", "Write a summary", "write a short report"],
)
def test_summarise_forms(description: str) -> None:
    step = only_step(description)
    assert (step.tool, step.args, step.instruction) == ("summarise", {}, description)


@pytest.mark.parametrize(
    ("description", "seconds"),
    [
        ("Wait 5 seconds", 5.0),
        ("wait 1 second", 1.0),
        ("Wait 2.5s", 2.5),
        ("pause for 3 seconds", 3.0),
        ("Wait for 2 minutes", 120.0),
        ("wait 0.5 minute", 30.0),
        ("Wait 7", 7.0),
        ("Wait 301 seconds", MAX_WAIT_SECONDS),
        ("wait 10 minutes", 300.0),
    ],
)
def test_wait_forms(description: str, seconds: float) -> None:
    step = only_step(description)
    assert step.tool == "wait"
    assert step.args == {"seconds": seconds}
    assert isinstance(step.args["seconds"], float)


def test_wait_with_unknown_unit_is_unrecognised() -> None:
    assert plan_task("Wait 5 hours").unrecognised == ("Wait 5 hours",)


# --- clause splitting --------------------------------------------------------


def test_then_splits_clauses() -> None:
    plan = plan_task('Write a note saying "x", then send an email to a@b.com saying "y"')
    assert tools(plan) == ["write_file", "send_email"]
    assert [s.instruction for s in plan.steps] == ['Write a note saying "x"', 'send an email to a@b.com saying "y"']


def test_connectives_and_sentences() -> None:
    plan = plan_task(
        "Wait 1.5 seconds. Then summarise the work and then write a note saying 'a'; after that email x@y.io: 'b'. "
        "Finally, pause for 2 s!"
    )
    assert tools(plan) == ["wait", "summarise", "write_file", "send_email", "wait"]
    assert plan.steps[0].args == {"seconds": 1.5}
    assert plan.steps[3].args["to"] == "x@y.io"
    assert plan.steps[4].instruction == "pause for 2 s"


def test_and_before_a_verb_splits() -> None:
    plan = plan_task('Write a note saying "hi" and email a@b.com saying "see the note"')
    assert tools(plan) == ["write_file", "send_email"]
    assert plan.steps[0].args["content"] == "hi"
    # "email it": the body would be the note, which a mail step cannot attach; not understood.
    assert plan_task('Write a note saying "hi" and email it to a@b.com').unrecognised == ("email it to a@b.com",)


def test_quoted_periods_semicolons_and_then_do_not_split() -> None:
    plan = plan_task('Send an email to a@b.com saying "Done. Then stop; Bye! Really? Yes." Wait 1 second')
    assert tools(plan) == ["send_email", "wait"]
    assert plan.steps[0].args["body"] == "Done. Then stop; Bye! Really? Yes."
    assert plan.steps[0].instruction == 'Send an email to a@b.com saying "Done. Then stop; Bye! Really? Yes."'


@pytest.mark.parametrize(
    ("description", "content"),
    [
        ("Write a note saying \u201cMeet at 3.30. Bring tea.\u201d", "Meet at 3.30. Bring tea."),
        ("Write a note saying 'don't panic. Ever.'", "don't panic. Ever."),
    ],
)
def test_curly_and_single_quotes(description: str, content: str) -> None:
    step = only_step(description)
    assert step.args["content"] == content
    assert step.instruction == description


def test_list_markers_and_lines() -> None:
    plan = plan_task("1. Write a note saying x\n2) Wait 2 s\n- Summarise\n* Email a@b.com saying y\n\n   \n")
    assert tools(plan) == ["write_file", "wait", "summarise", "send_email"]
    assert [s.instruction for s in plan.steps] == [
        "Write a note saying x",
        "Wait 2 s",
        "Summarise",
        "Email a@b.com saying y",
    ]


def test_inline_numbered_list() -> None:
    plan = plan_task("1. Write a note saying hi. 2. Wait 3 seconds. 3. Sum up.")
    assert [s.instruction for s in plan.steps] == ["Write a note saying hi", "Wait 3 seconds", "Sum up"]


def test_fillers_are_ignored_but_kept_in_instruction() -> None:
    plan = plan_task("First, please write a note saying 'x'. Could you also wait 4 seconds?")
    assert tools(plan) == ["write_file", "wait"]
    assert plan.steps[1].instruction == "Could you also wait 4 seconds"
    assert plan.unrecognised == ()


# --- unrecognised and edge cases ---------------------------------------------


@pytest.mark.parametrize("description", ["", "   ", "\n\n", " ; . "])
def test_empty_description_gives_empty_plan(description: str) -> None:
    assert plan_task(description) == Plan(steps=(), unrecognised=())


def test_unknown_instruction_is_reported() -> None:
    assert plan_task("Dance a jig.") == Plan(steps=(), unrecognised=("Dance a jig",))


def test_unknown_mixed_with_known_keeps_order() -> None:
    plan = plan_task("Order a pizza, then wait 2 seconds. Call mom! Write a note saying 'x'; juggle")
    assert tools(plan) == ["wait", "write_file"]
    assert plan.unrecognised == ("Order a pizza", "Call mom", "juggle")


def test_args_are_json_serialisable() -> None:
    plan = plan_task('Email a@b.com saying "x". Write a file named "y.txt" saying "z". Summarise. Wait 1 s')
    assert len(plan.steps) == 4
    assert json.loads(json.dumps([s.args for s in plan.steps])) == [s.args for s in plan.steps]


@pytest.mark.parametrize("description", ['"unterminated', "'", "\u201c", ". . .", "\x00 1 \x00", "then and"])
def test_odd_input_never_raises(description: str) -> None:
    plan = plan_task(description)
    assert plan.steps == ()


# --- place_checkpoints --------------------------------------------------------


def cp(stage: str, description: str = "", question: str = "") -> CheckpointSpec:
    return CheckpointSpec(stage=stage, description=description, verification_question=question)


STEPS = plan_task("Write a note saying x. Wait 1 second. Summarise. Email a@b.com saying y").steps


def test_placement_matches_tool_words() -> None:
    assert tools(Plan(STEPS, ())) == ["write_file", "wait", "summarise", "send_email"]
    checkpoints = [
        cp("Review", "Check the summary"),
        cp("Outbound", "", "Is the recipient right?"),
    ]
    assert place_checkpoints(STEPS, checkpoints) == [2, 3]


def test_placement_uses_inflections() -> None:
    assert place_checkpoints(STEPS, [cp("Before sending", "emails go out")]) == [3]
    assert place_checkpoints(STEPS, [cp("Pausing")]) == [1]
    assert place_checkpoints(STEPS, [cp("Saved notes")]) == [0]


def test_unmatched_checkpoint_guards_the_next_unguarded_step() -> None:
    assert place_checkpoints(STEPS, [cp("Sanity check", "Looks fine?")]) == [0]
    assert place_checkpoints(STEPS, [cp("Report", "summary ok"), cp("Looks fine?")]) == [2, 3]


def test_a_checkpoint_guards_the_step_it_names_even_if_earlier() -> None:
    # Bound by what it mentions: the note check guards the note (step 0), though listed after the summary's.
    checkpoints = [cp("Summary review"), cp("File check", "Was the note saved?"), cp("Mail", "send")]
    assert place_checkpoints(STEPS, checkpoints) == [2, 0, 3]


def test_more_checkpoints_than_steps_guard_the_finish() -> None:
    steps = plan_task("Wait 1 second. Write a note saying x").steps
    checkpoints = [cp("Pause"), cp("Email"), cp("File"), cp("Wait again"), cp("Anything")]
    # No mail step: "Email" guards the finish; "Wait again" finds the only wait taken; "Anything" comes last.
    assert place_checkpoints(steps, checkpoints) == [0, 2, 1, 2, 2]


def test_unmatched_checkpoints_spread_over_steps_then_before_finishing() -> None:
    steps = plan_task("Write a note saying x. Summarise").steps
    assert place_checkpoints(steps, [cp("One"), cp("Two"), cp("Three"), cp("Four")]) == [0, 1, 2, 2]


def test_no_steps_and_no_checkpoints() -> None:
    assert place_checkpoints((), [cp("Email"), cp("Other")]) == [0, 0]
    assert place_checkpoints(STEPS, []) == []


def test_same_tool_twice_gates_in_order() -> None:
    steps = plan_task("Email a@b.com saying x. Wait 1 s. Email c@d.com saying y").steps
    result = place_checkpoints(steps, [cp("First mail"), cp("Wait"), cp("Second mail")])
    assert result == [0, 1, 2]


PRESS_AND_BOARD = plan_task(
    'Email board@acme.com with subject "Q3" saying "Revenue grew 12%". '
    'Then email press@acme.com with subject "Q3" saying "Acme grew 12% in Q3". Then summarise.'
).steps


@pytest.mark.parametrize(
    ("checkpoints", "expected"),
    [
        ([cp("Board", "Mail the board", "OK to mail the board?"), cp("Press", "", "OK to tell the press?")], [0, 1]),
        # Listed the other way round, each still guards the mail it names.
        ([cp("Press", "", "OK to tell the press?"), cp("Board", "Mail the board", "OK to mail the board?")], [1, 0]),
        # Named by the whole address too.
        ([cp("Outbound", "", "Send to press@acme.com?"), cp("Outbound", "", "Send to board@acme.com?")], [1, 0]),
        # Two that only say "mail": one mail each, never both on the first.
        ([cp("Mail", "", "Send this mail?"), cp("Mail", "", "Send this mail too?")], [0, 1]),
        # A third mail checkpoint has no mail step left: it guards the finish.
        ([cp("Mail"), cp("Mail"), cp("Mail")], [0, 1, 3]),
    ],
)
def test_two_mail_checkpoints_never_guard_the_same_step(checkpoints: list[CheckpointSpec], expected: list[int]) -> None:
    assert tools(Plan(PRESS_AND_BOARD, ())) == ["send_email", "send_email", "summarise"]
    placed = place_checkpoints(PRESS_AND_BOARD, checkpoints)
    assert placed == expected
    steps_guarded = [i for i in placed if i < len(PRESS_AND_BOARD)]
    assert len(steps_guarded) == len(set(steps_guarded))


def test_a_file_checkpoint_names_its_file() -> None:
    steps = plan_task("Write a note called draft.md saying a. Write a note called final.md saying b").steps
    assert place_checkpoints(steps, [cp("Final", "", "Is the final version right?"), cp("Draft")]) == [1, 0]
