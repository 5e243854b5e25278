//! php_worker's PHP extension: the module entry passed to `php_module_startup`, and the
//! PHP functions it registers, with FrankenPHP's names so existing worker scripts
//! (Laravel Octane, Symfony Runtime) run unchanged.
//!
//! The function bodies are in csrc/functions.c and csrc/worker.c: they call back into PHP (the request
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
    module
}

/// The module entry for the SAPI's startup.
pub fn module_entry() -> *mut ModuleEntry {
    get_module()
}
