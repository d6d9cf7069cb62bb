//! The process runner with real processes: stdin and prompt file, environment, process groups,
//! timeouts, output caps.

use std::path::Path;
use std::time::Duration;

use loopwright_engine::ports::{ExecOutcome, Execution, Notice, ProcessGroup, StageRequest};
use loopwright_engine::{RunId, Runner, TaskId};
use loopwright_runners::ProcessRunner;
use loopwright_spec::{Agent, Mode, RunnerKind, SourceFile, StageId};
use pretty_assertions::assert_eq;
use tokio::sync::mpsc;

fn request(dir: &Path, agent: Option<Agent>, commands: &[&str], timeout: Duration) -> StageRequest {
    StageRequest {
        run_id: RunId::new("run-1"),
        task_id: TaskId::parse("task-1").expect("task"),
        stage: StageId::parse("build").expect("stage"),
        attempt: 2,
        mode: Mode::Plan,
        agent,
        commands: commands.iter().map(|c| (*c).to_owned()).collect(),
        prompt: "# Task\nmake it work\n".into(),
        timeout,
        workspace: dir.to_path_buf(),
        confine: Default::default(),
        purpose: Default::default(),
        traceparent: None,
    }
}

fn command_agent(argv: &str) -> Agent {
    let src = SourceFile::new("agent.md", format!("---\ncommand: {argv}\n---\npersona\n"));
    loopwright_spec::parse_agent(&src, "agent", RunnerKind::Command).expect("agent")
}

async fn run(runner: &ProcessRunner, req: &StageRequest) -> (Execution, Vec<Notice>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let execution = runner.run(req, tx).await;
    let mut notices = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notices.push(n);
    }
    (execution, notices)
}

fn alive(pid: i32) -> bool {
    // `kill -0` through /proc: a zombie or missing process counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test]
async fn command_agents_get_the_prompt_on_stdin_in_a_file_and_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = ProcessRunner::new(dir.path().join("runs"));
    let script = r#"["sh", "-c", "cat; echo; cat \"$LOOPWRIGHT_PROMPT_FILE\" | head -1; echo $LOOPWRIGHT_RUN_ID $LOOPWRIGHT_TASK_ID $LOOPWRIGHT_STAGE_ID $LOOPWRIGHT_ATTEMPT $LOOPWRIGHT_MODE; pwd"]"#;
    let req = request(dir.path(), Some(command_agent(script)), &[], Duration::from_secs(10));
    let (execution, notices) = run(&runner, &req).await;
    assert_eq!(execution.outcome, ExecOutcome::Exited(0));
    let cwd = dir.path().canonicalize().expect("canonical");
    assert_eq!(
        execution.stdout,
        format!("# Task\nmake it work\n\n# Task\nrun-1 task-1 build 2 plan\n{}\n", cwd.display())
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("runs/run-1/prompts/build-2.md")).expect("prompt file"),
        req.prompt
    );
    assert_eq!(notices.len(), 1);
}

#[tokio::test]
async fn shell_commands_run_in_order_and_stop_at_the_first_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = ProcessRunner::new(dir.path().join("runs"));
    let req = request(dir.path(), None, &["echo one", "echo oops >&2; exit 3", "echo never"], Duration::from_secs(10));
    let (execution, notices) = run(&runner, &req).await;
    assert_eq!(execution.outcome, ExecOutcome::Exited(3));
    assert_eq!(execution.stdout, "one\n");
    assert_eq!(execution.stderr, "oops\n");
    let started: Vec<(&ProcessGroup, &String)> = notices
        .iter()
        .filter_map(|n| match n {
            Notice::ProcessStarted { group, command } => Some((group, command)),
            Notice::NetworkRefused { .. } | Notice::RateLimited { .. } => None,
        })
        .collect();
    assert_eq!(started.len(), notices.len(), "{notices:?}");
    let commands: Vec<String> = started.iter().map(|(_, c)| (*c).clone()).collect();
    for (group, _) in &started {
        assert!(group.start_time.is_some(), "the start time of {} is recorded", group.pgid);
    }
    assert_eq!(commands, vec!["echo one", "echo oops >&2; exit 3"]);
}

#[tokio::test]
async fn a_timeout_ends_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut runner = ProcessRunner::new(dir.path().join("runs"));
    runner.kill_grace = Duration::from_millis(300);
    let pids = dir.path().join("pids");
    let cmd = format!("sleep 100 & echo $! > {0}; (sleep 100 & echo $! >> {0}; wait) & wait", pids.display());
    let req = request(dir.path(), None, &[cmd.as_str()], Duration::from_millis(500));
    let started = std::time::Instant::now();
    let (execution, _) = run(&runner, &req).await;
    assert_eq!(execution.outcome, ExecOutcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let pids: Vec<i32> =
        std::fs::read_to_string(&pids).expect("pids").lines().map(|l| l.parse().expect("pid")).collect();
    assert_eq!(pids.len(), 2);
    std::thread::sleep(Duration::from_millis(100));
    for pid in pids {
        assert!(!alive(pid), "process {pid} survived the timeout");
    }
}

#[tokio::test]
async fn background_leftovers_end_with_the_stage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = ProcessRunner::new(dir.path().join("runs"));
    let pid_file = dir.path().join("pid");
    let cmd = format!("sleep 100 > /dev/null 2>&1 & echo $! > {}; echo done", pid_file.display());
    let req = request(dir.path(), None, &[cmd.as_str()], Duration::from_secs(10));
    let (execution, _) = run(&runner, &req).await;
    assert_eq!((execution.outcome, execution.stdout.as_str()), (ExecOutcome::Exited(0), "done\n"));
    let pid: i32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("pid");
    std::thread::sleep(Duration::from_millis(100));
    assert!(!alive(pid), "background process {pid} outlived its stage");
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = ProcessRunner::new(dir.path().join("runs"));
    let req = request(dir.path(), Some(command_agent(r#"["no-such-agent-program"]"#)), &[], Duration::from_secs(5));
    let (execution, notices) = run(&runner, &req).await;
    assert_eq!(
        execution.outcome,
        ExecOutcome::SpawnFailed(
            "cannot start `no-such-agent-program`: program not found (is it installed and on PATH?)".into()
        )
    );
    assert!(notices.is_empty());
}

#[tokio::test]
async fn output_is_capped_keeping_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut runner = ProcessRunner::new(dir.path().join("runs"));
    runner.output_cap = 1000;
    let req = request(dir.path(), None, &["seq 1 10000"], Duration::from_secs(10));
    let (execution, _) = run(&runner, &req).await;
    assert!(
        execution.stdout.starts_with("[... 47894 bytes of earlier output omitted ...]\n"),
        "{}",
        &execution.stdout[..80]
    );
    assert!(execution.stdout.ends_with("9999\n10000\n"));
    assert_eq!(execution.stdout.len() - "[... 47894 bytes of earlier output omitted ...]\n".len(), 1000);
}

#[test]
fn plain_commands_skip_the_shell_and_others_use_it() {
    use loopwright_runners::shell_argv;
    let sh = |c: &str| vec!["sh".to_owned(), "-c".to_owned(), c.to_owned()];
    assert_eq!(shell_argv("true"), vec!["true"]);
    assert_eq!(shell_argv("echo  hello world"), vec!["echo", "hello", "world"]);
    for c in [
        "echo $HOME",
        "echo a > f",
        "cd /tmp",
        "ls *.rs",
        "A=1 env",
        "echo 'q'",
        "x && y",
        "no-such-program-xyz",
        "exit 3",
    ] {
        assert_eq!(shell_argv(c), sh(c), "{c}");
    }
}

#[test]
fn strays_are_found_by_their_environment_and_ended() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut runner = ProcessRunner::new(dir.path().join("runs"));
    runner.kill_grace = Duration::from_millis(200);
    let run_id = format!("run-stray-{}", std::process::id());
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30; wait"])
        .env("LOOPWRIGHT_RUN_ID", &run_id)
        .env("LOOPWRIGHT_STAGE_ID", "build")
        .process_group(0)
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(100));
    // Another stage of the same run is left alone.
    runner.end_strays(&RunId::new(run_id.clone()), &StageId::parse("deploy").expect("id"));
    assert!(child.try_wait().expect("wait").is_none(), "the other stage's process still runs");
    runner.end_strays(&RunId::new(run_id), &StageId::parse("build").expect("id"));
    let status = child.wait().expect("wait");
    assert!(!status.success(), "ended by a signal");
    assert!(
        loopwright_runners::process::groups_with_env(&[("LOOPWRIGHT_STAGE_ID", "build"), ("LOOPWRIGHT_RUN_ID", "x")])
            .is_empty()
    );
}

#[tokio::test]
async fn the_start_time_told_at_spawn_is_the_one_in_proc() {
    // The start time is taken from the clock around the spawn when it can be; it must be the
    // value /proc gives, or a later pid-reuse check would take our process for another.
    let dir = tempfile::tempdir().expect("tempdir");
    let argv = vec!["sleep".to_owned(), "0.05".to_owned()];
    for _ in 0..20 {
        let seen = std::cell::RefCell::new(None);
        let spawn = loopwright_runners::process::Spawn {
            argv: &argv,
            stdin: None,
            env: &[],
            inherit: true,
            cwd: dir.path(),
            deadline: tokio::time::Instant::now() + Duration::from_secs(10),
            grace: Duration::from_millis(100),
            output_cap: 1024,
        };
        let result = loopwright_runners::process::run(spawn, |pgid, start| {
            let from_proc = loopwright_runners::process::start_time(u32::try_from(pgid).expect("pid"));
            *seen.borrow_mut() = Some((start, from_proc));
        })
        .await;
        assert_eq!(result.end, loopwright_runners::process::ProcessEnd::Exited(0));
        let (told, from_proc) = seen.into_inner().expect("on_start was called");
        assert!(from_proc.is_some(), "/proc has the start time of a live process");
        assert_eq!(told, from_proc);
    }
}
