//! php_worker's PHP extension: the module entry passed to `php_module_startup`, and the
//! PHP functions it registers, with FrankenPHP's names so existing worker scripts
//! (Laravel Octane, Symfony Runtime) run unchanged.
//!
//! The function bodies are in csrc/functions.c, csrc/worker.c and csrc/store.c: they call back into PHP (the request
//! handler) and can bail out, which must not happen across Rust frames.

use ext_php_rs::args::Arg;
use ext_php_rs::builders::FunctionBuilder;
use ext_php_rs::flags::DataType;
use ext_php_rs::prelude::*;
use ext_php_rs::types::Zval;
use ext_php_rs::zend::{ExecuteData, ModuleEntry};

unsafe extern "C" {
    fn pw_shim_module_startup(type_: i32, module_number: i32) -> i32;
    safe fn pw_php_handle_request(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_finish_request(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_headers_send(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_request_headers(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_response_headers(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_frankenphp_log(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_get(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_put(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_add(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_increment(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_forget(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_flush(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_local_count(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_get(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_put(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_add(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_increment(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_forget(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_flush(execute_data: &mut ExecuteData, return_value: &mut Zval);
    safe fn pw_php_shared_count(execute_data: &mut ExecuteData, return_value: &mut Zval);
}

type Handler = extern "C" fn(&mut ExecuteData, &mut Zval);

/// The store functions of one scope ("local" or "shared"), with their handlers in
/// csrc/store.c: get, put, add, increment, forget, flush, count.
fn store_functions<'a>(module: ModuleBuilder<'a>, scope: &str, handlers: [Handler; 7]) -> ModuleBuilder<'a> {
    let [get, put, add, increment, forget, flush, count] = handlers;
    let name = |op: &str| format!("php_worker_{scope}_{op}");
    let key = || Arg::new("key", DataType::String);
    let put_like = |op: &str, handler: Handler| {
        FunctionBuilder::new(name(op), handler)
            .arg(key())
            .arg(Arg::new("value", DataType::Mixed))
            .not_required()
            .arg(Arg::new("ttl", DataType::Long).default("0"))
            .returns(DataType::Bool, false, false)
    };
    module
        // get(string $key, mixed $default = null): mixed
        .function(
            FunctionBuilder::new(name("get"), get)
                .arg(key())
                .not_required()
                .arg(Arg::new("default", DataType::Mixed).default("null"))
                .returns(DataType::Mixed, false, true),
        )
        // put/add(string $key, mixed $value, int $ttl = 0): bool
        .function(put_like("put", put))
        .function(put_like("add", add))
        // increment(string $key, int $by = 1): int|false
        .function(
            FunctionBuilder::new(name("increment"), increment)
                .arg(key())
                .not_required()
                .arg(Arg::new("by", DataType::Long).default("1"))
                .returns(DataType::Mixed, false, true),
        )
        // forget(string $key): bool, flush(): bool, count(): int
        .function(FunctionBuilder::new(name("forget"), forget).arg(key()).returns(DataType::Bool, false, false))
        .function(FunctionBuilder::new(name("flush"), flush).returns(DataType::Bool, false, false))
        .function(FunctionBuilder::new(name("count"), count).returns(DataType::Long, false, false))
}

#[php_module]
pub fn get_module(module: ModuleBuilder) -> ModuleBuilder {
    let mut module = module
        .name("php_worker")
        .startup_function(pw_shim_module_startup)
        // frankenphp_handle_request(callable $callback): bool
        .function(
            FunctionBuilder::new("frankenphp_handle_request", pw_php_handle_request)
                .arg(Arg::new("callback", DataType::Callable))
                .returns(DataType::Bool, false, false),
        )
        // headers_send(int $status = 200): int
        .function(
            FunctionBuilder::new("headers_send", pw_php_headers_send)
                .not_required()
                .arg(Arg::new("status", DataType::Long).default("200"))
                .returns(DataType::Long, false, false),
        );
    // frankenphp_finish_request(): bool, and php-fpm's name for it
    for name in ["frankenphp_finish_request", "fastcgi_finish_request"] {
        module = module.function(FunctionBuilder::new(name, pw_php_finish_request).returns(DataType::Bool, false, false));
    }
    // frankenphp_request_headers(): array, and Apache's names for it
    for name in ["frankenphp_request_headers", "getallheaders", "apache_request_headers"] {
        module = module.function(FunctionBuilder::new(name, pw_php_request_headers).returns(DataType::Array, false, false));
    }
    // frankenphp_response_headers(): array, and Apache's name for it
    for name in ["frankenphp_response_headers", "apache_response_headers"] {
        module = module.function(FunctionBuilder::new(name, pw_php_response_headers).returns(DataType::Array, false, false));
    }
    // frankenphp_log(string $message, int $level = FRANKENPHP_LOG_LEVEL_INFO, array $context = []): void
    module = module.function(
        FunctionBuilder::new("frankenphp_log", pw_php_frankenphp_log)
            .arg(Arg::new("message", DataType::String))
            .not_required()
            .arg(Arg::new("level", DataType::Long).default("0"))
            .arg(Arg::new("context", DataType::Array).default("[]"))
            .returns(DataType::Void, false, false),
    );
    module = store_functions(module, "local", [
        pw_php_local_get,
        pw_php_local_put,
        pw_php_local_add,
        pw_php_local_increment,
        pw_php_local_forget,
        pw_php_local_flush,
        pw_php_local_count,
    ]);
    store_functions(module, "shared", [
        pw_php_shared_get,
        pw_php_shared_put,
        pw_php_shared_add,
        pw_php_shared_increment,
        pw_php_shared_forget,
        pw_php_shared_flush,
        pw_php_shared_count,
    ])
}

/// The module entry for the SAPI's startup: built once per process. Building it leaks
/// its function table (ext-php-rs hands PHP raw pointers it never takes back); PHP uses
/// the entry in place and resets it at shutdown, as it does with its built-in modules'
/// static entries, so one serves every engine start.
pub fn module_entry() -> *mut ModuleEntry {
    static ENTRY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ENTRY.get_or_init(|| get_module() as usize) as *mut ModuleEntry
}
