//! The `aiwg-serve` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use aiwg_server::config::{Config, Overrides};

mod cli;
mod telemetry;

/// glibc's allocator spent a large part of serve's CPU under ingestion (perf), much of it freeing on one
/// thread what another allocated (frames parsed by socket tasks, dropped by the writer). The `override`
/// feature gives the bundled SQLite, which calls `malloc` itself, the same allocator (its own binds and
/// statements on the writer's thread). What each step gained: `docs/performance.md`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "aiwg-serve", version, about = "Control plane for AI-agent executors (executor.aiwg.io/v1)")]
struct Cli {
    #[command(flatten)]
    global: aiwg_client::Global,
    /// Log lines on stderr: text for people, json (one object per line) for log shippers
    #[arg(long, global = true, env = "AIWG_SERVE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane.
    Serve {
        /// Address to listen on [env: AIWG_SERVE_BIND] [default: 127.0.0.1:7337]
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Directory holding the SQLite store, created if missing [env: AIWG_SERVE_DATA_DIR]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// A PostgreSQL database instead of the embedded SQLite store: postgres://user:password@host/db
        /// [env: AIWG_SERVE_STORE_DATABASE_URL]
        #[arg(long)]
        database_url: Option<String>,
        /// TOML configuration file (see config.example.toml)
        #[arg(long, env = "AIWG_SERVE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Registered executors.
    Executors {
        #[command(subcommand)]
        command: cli::ExecutorsCommand,
    },
    /// HTTP agent runtimes (the WattSwarm protocol): add, list, check.
    Runtimes {
        #[command(subcommand)]
        command: cli::RuntimesCommand,
    },
    /// Named operators and their roles (admins only): add, list, revoke.
    Operators {
        #[command(subcommand)]
        command: cli::OperatorsCommand,
    },
    /// The questions agents wait on: list them across missions, answer one.
    Hitl {
        #[command(subcommand)]
        command: cli::HitlCommand,
    },
    /// Webhook notifications (admins): subscriptions, their deliveries, a delivery sent again.
    Webhooks {
        #[command(subcommand)]
        command: cli::WebhooksCommand,
    },
    /// The audit trail (admins): who did what, from where, when, and how it ended.
    Audit(cli::AuditArgs),
    /// Dispatch a mission (and with --wait, follow it to its end).
    Dispatch(Box<cli::DispatchArgs>),
    /// Missions: list, show, pause, resume, abort, answer HITL.
    Missions {
        #[command(subcommand)]
        command: cli::MissionsCommand,
    },
    /// The event log, or with --follow the live stream.
    Events(cli::EventsArgs),
    /// What missions spent: tokens and cost by day, operator, executor or model.
    Usage(cli::UsageArgs),
    /// The store of a running serve: compact now (retention).
    Store {
        #[command(subcommand)]
        command: cli::StoreCommand,
    },
    /// The contract's conformance suite, live: check a control plane by playing executors against it.
    Conformance {
        #[command(subcommand)]
        command: aiwg_conformance::ConformanceCommand,
    },
    /// Run the reference executor: register with a serve and run its missions through an adapter.
    Executor(Box<aiwg_executor::ExecutorArgs>),
    /// Copy the store to FILE, consistently, also while serve runs (restore: see docs/operations/backup-and-restore.md)
    Backup {
        /// Where to write the copy; an existing file is never overwritten
        file: PathBuf,
        /// The data directory serve uses [env: AIWG_SERVE_DATA_DIR]
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// serve's configuration file, to find its data directory
        #[arg(long, env = "AIWG_SERVE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish), e.g. into
    /// ~/.local/share/bash-completion/completions/aiwg-serve (create the directory first); it asks this
    /// binary at each TAB, and completes executors, missions, webhooks, operators and runtimes with the
    /// names and ids of the serve in AIWG_SERVE_URL (AIWG_SERVE_TOKEN)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `--version`: the release and, when built from a checkout, the commit (what a bug report needs).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| match aiwg_server::metrics::GIT_COMMIT {
    Some(commit) => format!("{} ({commit})", env!("CARGO_PKG_VERSION")),
    None => env!("CARGO_PKG_VERSION").to_owned(),
});

/// The command line, its `--help` (and that of the commands that follow missions) ending with the exit codes.
fn command() -> clap::Command {
    let codes = cli::exit_codes();
    let with_codes = |c: clap::Command| c.after_help(codes.clone());
    let command = with_codes(Cli::command()).version(VERSION.as_str());
    ["dispatch", "missions", "executors", "runtimes", "events", "store"]
        .into_iter()
        .fold(command, |command, name| command.mut_subcommand(name, with_codes))
        .mut_subcommand("missions", |missions| missions.mut_subcommand("watch", with_codes))
}

impl Command {
    /// The global flags this command takes no notice of: refused when given, rather than silently
    /// ignored (`serve --token X` looked like it set serve's token).
    fn ignores(&self) -> &'static [&'static str] {
        match self {
            Command::Serve { .. } | Command::Backup { .. } | Command::Completions { .. } => {
                &["server", "token", "ca_cert", "json"]
            }
            Command::Executor(_) => &["token", "json"],
            _ => &[],
        }
    }
}

fn main() -> ExitCode {
    // The executor's agents run under this very binary as their guard: that is all such a process does.
    aiwg_executor::run_guard_if_asked();
    // A TAB in a shell that sourced `completions`' script: answered, and that is all this process does.
    cli::complete::answer_if_asked(command);
    let matches = command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Some(flag) =
        cli.command.ignores().iter().find(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
    {
        let name = matches.subcommand_name().unwrap_or_default();
        let message =
            format!("--{} is for the operator commands; `{name}` takes no notice of it", flag.replace('_', "-"));
        command().error(clap::error::ErrorKind::ArgumentConflict, message).exit();
    }
    // serve's logs start once its configuration is read: they may send spans too (`[otel]`).
    if !matches!(cli.command, Command::Serve { .. }) {
        init_logs(cli.log_format, None);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aiwg-serve: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let operator = match cli.command {
        Command::Serve { bind, data_dir, database_url, config } => {
            return runtime.block_on(serve(Overrides { bind, data_dir, database_url }, config, cli.log_format))
        }
        Command::Executors { command } => cli::Operator::Executors(command),
        Command::Store { command } => cli::Operator::Store(command),
        Command::Runtimes { command } => cli::Operator::Runtimes(command),
        Command::Operators { command } => cli::Operator::Operators(command),
        Command::Audit(args) => cli::Operator::Audit(args),
        Command::Hitl { command } => cli::Operator::Hitl(command),
        Command::Webhooks { command } => cli::Operator::Webhooks(command),
        Command::Dispatch(args) => cli::Operator::Dispatch(args),
        Command::Missions { command } => cli::Operator::Missions(command),
        Command::Events(args) => cli::Operator::Events(args),
        Command::Usage(args) => cli::Operator::Usage(args),
        Command::Executor(args) => return runtime.block_on(aiwg_executor::run(*args)),
        Command::Conformance { command } => {
            return runtime.block_on(aiwg_conformance::run(&cli.global, command));
        }
        Command::Completions { shell } => return cli::completions(shell, command()),
        Command::Backup { file, data_dir, config } => return runtime.block_on(backup(file, data_dir, config)),
    };
    runtime.block_on(cli::run(cli.global, operator))
}

/// Logs on stderr, filtered by `AIWG_SERVE_LOG` (`info` by default). Text is coloured on a terminal only;
/// JSON is one object per line (`timestamp`, `level`, `target`, `fields`, and the request's span, if any).
///
/// Requests are logged once each, at DEBUG, when answered (status and latency; `AIWG_SERVE_LOG=debug`
/// or `info,tower_http=debug` shows them; see `http::router`). Faults are logged where they happen (a
/// storage failure behind a 500 at ERROR, a forward failure at WARN), not for every 5xx: a 503 for no
/// executor available is a normal answer.
///
/// With `tracer`, the server's spans (its own, at DEBUG) also go to OpenTelemetry: each layer filters
/// for itself, so the log's filter does not decide what is traced, nor the other way round.
fn init_logs(format: LogFormat, tracer: Option<opentelemetry_sdk::trace::Tracer>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("AIWG_SERVE_LOG").unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => {
            logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).with_filter(filter).boxed()
        }
        LogFormat::Json => logs.json().with_current_span(true).with_span_list(false).with_filter(filter).boxed(),
    };
    let traced = tracing_subscriber::filter::Targets::new().with_target("aiwg_server", tracing::Level::DEBUG);
    let traces = tracer.map(|tracer| tracing_opentelemetry::layer().with_tracer(tracer).with_filter(traced));
    tracing_subscriber::registry().with(logs).with(traces).init();
}

async fn backup(file: PathBuf, data_dir: Option<PathBuf>, config: Option<PathBuf>) -> ExitCode {
    let config = match Config::load(config.as_deref(), std::env::vars(), Overrides { data_dir, ..Overrides::default() })
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aiwg-serve: {e}");
            return ExitCode::from(2);
        }
    };
    if !config.store.database_url.is_empty() {
        // PostgreSQL has its own tools, which also copy a live database consistently.
        eprintln!(
            "aiwg-serve: the store is PostgreSQL (store.database_url): back it up with pg_dump, see \
             docs/operations/backup-and-restore.md"
        );
        return ExitCode::from(2);
    }
    match aiwg_server::backup::backup(&config.server.data_dir, &file).await {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("aiwg-serve: backup failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(overrides: Overrides, file: Option<PathBuf>, log_format: LogFormat) -> ExitCode {
    let config = match Config::load(file.as_deref(), std::env::vars(), overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aiwg-serve: {e}");
            return ExitCode::from(2);
        }
    };
    // Dropped last, after the server stopped: the spans still queued are sent then.
    let (_traces, tracer) = match telemetry::Traces::start(&config.otel) {
        Ok(Some((traces, tracer))) => (Some(traces), Some(tracer)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("aiwg-serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logs(log_format, tracer);
    // Handlers first: a signal that arrives while the server starts must stop it gracefully too.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("aiwg-serve: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let handle = match aiwg_server::serve::start(config).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("aiwg-serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (stop, reload) = (handle.stopper(), handle.reloader());
    let Signals { interrupt, terminate, mut hangup } = signals;
    tokio::spawn(async move {
        stopping(interrupt, terminate).await;
        tracing::info!("signal received; shutting down");
        let _ = stop.send(true);
    });
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reading the TLS certificate and key again");
            reload.reload();
        }
    });
    handle.stopped().await;
    ExitCode::SUCCESS
}

/// SIGINT and SIGTERM (stop), SIGHUP (read the TLS files again), registered when installed.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }
}

/// Resolves at the first SIGINT or SIGTERM.
async fn stopping(mut interrupt: tokio::signal::unix::Signal, mut terminate: tokio::signal::unix::Signal) {
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
}
