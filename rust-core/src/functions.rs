//! php_worker's PHP extension: the module entry passed to `php_module_startup`, and the
//! PHP functions it registers.

use ext_php_rs::prelude::*;
use ext_php_rs::zend::ModuleEntry;

#[php_module]
pub fn get_module(module: ModuleBuilder) -> ModuleBuilder {
    module.name("php_worker")
}

/// The module entry for the SAPI's startup.
pub fn module_entry() -> *mut ModuleEntry {
    get_module()
}
