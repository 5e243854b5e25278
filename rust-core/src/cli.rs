//! `caddy php-cli`: one command line run the way PHP's CLI runs it, on the embedded PHP
//! (csrc/cli.c), in a process where no engine runs.

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::atomic::Ordering;

use crate::abi::types::{
    CliCommand, PHP_WORKER_CLI_CODE, PHP_WORKER_CLI_INFO, PHP_WORKER_CLI_INI, PHP_WORKER_CLI_LINT, PHP_WORKER_CLI_MODULES,
    PHP_WORKER_CLI_SCRIPT, PHP_WORKER_CLI_STDIN, PHP_WORKER_CLI_VERSION,
};
use crate::config::EngineConfig;
use crate::supervisor::engine::ENGINE_ALIVE;
use crate::php::sys::{self, CliArgs, CliMode};
use crate::runtime::PHP_THREAD_STACK;

/// A command line, copied out of the host's memory.
pub struct Command {
    mode: CliMode,
    argv: Vec<CString>,
    code: Option<CString>,
    ini_entries: Option<CString>,
    ini_defaults: Option<CString>,
    ini_path: Option<CString>,
    no_ini: bool,
    executable: Option<CString>,
}

/// Copies an optional C string.
///
/// # Safety
/// `s` is NULL or a valid NUL-terminated string.
unsafe fn copy_str(s: *const c_char) -> Option<CString> {
    // SAFETY: per this function's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_owned())
}

impl Command {
    /// None when the command is not one a CLI can run, or its settings are invalid.
    ///
    /// # Safety
    /// Every pointer of `c` is NULL or valid, `argv` holding `argc` strings.
    pub unsafe fn copy(c: &CliCommand) -> Option<Command> {
        let mode = match c.mode {
            PHP_WORKER_CLI_SCRIPT => CliMode::Script,
            PHP_WORKER_CLI_CODE => CliMode::Code,
            PHP_WORKER_CLI_VERSION => CliMode::Version,
            PHP_WORKER_CLI_MODULES => CliMode::Modules,
            PHP_WORKER_CLI_INFO => CliMode::Info,
            PHP_WORKER_CLI_LINT => CliMode::Lint,
            PHP_WORKER_CLI_STDIN => CliMode::Stdin,
            PHP_WORKER_CLI_INI => CliMode::Ini,
            _ => return None,
        };
        let mut argv = Vec::with_capacity(c.argc);
        for i in 0..c.argc {
            // SAFETY: argv holds argc strings, per this function's contract.
            argv.push(unsafe { copy_str(*c.argv.add(i)) }?);
        }
        // SAFETY: per this function's contract.
        let (code, ini_path, executable) = unsafe { (copy_str(c.code), copy_str(c.ini_path), copy_str(c.executable)) };
        let (ini_entries, ini_defaults) = if c.settings_json.is_null() {
            (None, None)
        } else {
            // SAFETY: per this function's contract.
            let json = unsafe { std::slice::from_raw_parts(c.settings_json, c.settings_len) };
            // The server's php_ini rendering, so both read the same settings alike.
            let config = EngineConfig::from_json(json).ok()?;
            let (entries, defaults) = (config.ini_entries().ok()?, config.ini_defaults().ok()?);
            (Some(CString::new(entries).ok()?), Some(CString::new(defaults).ok()?))
        };
        let valid = match mode {
            CliMode::Script | CliMode::Lint | CliMode::Stdin => !argv.is_empty(),
            CliMode::Code => code.is_some(),
            _ => true,
        };
        valid.then_some(Command { mode, argv, code, ini_entries, ini_defaults, ini_path, no_ini: c.no_ini, executable })
    }
}

/// Runs the command on a thread with a PHP thread's stack: its exit status.
pub fn run(command: Command) -> i32 {
    if ENGINE_ALIVE.swap(true, Ordering::AcqRel) {
        return 2; // one SAPI per process
    }
    let status = std::thread::Builder::new()
        .name("php-cli".into())
        .stack_size(PHP_THREAD_STACK)
        .spawn(move || {
            let mut argv: Vec<*mut c_char> = command.argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
            let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
            let args = CliArgs {
                mode: command.mode,
                argc: argv.len() as c_int,
                argv: argv.as_mut_ptr(),
                code: ptr(&command.code),
                ini_entries: ptr(&command.ini_entries),
                ini_defaults: ptr(&command.ini_defaults),
                ini_path: ptr(&command.ini_path),
                no_ini: command.no_ini as c_int,
                executable: ptr(&command.executable),
            };
            // SAFETY: every pointer in `args` borrows from `command` and `argv`, alive
            // for the call; PHP reads argv and never writes through it.
            unsafe { sys::pw_shim_cli_run(&args) }
        })
        .map_or(1, |t| t.join().unwrap_or(1));
    ENGINE_ALIVE.store(false, Ordering::Release);
    status
}
