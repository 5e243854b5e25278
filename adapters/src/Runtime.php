<?php

namespace PhpWorker;

use RuntimeException;

/**
 * Checks that the php_worker_* store functions exist, which they do only in scripts
 * that php_worker runs (not in the PHP CLI, php-fpm or another server).
 */
final class Runtime
{
    public static function available(): bool
    {
        return function_exists('php_worker_shared_get');
    }

    /** @throws RuntimeException naming $what when the functions are missing. */
    public static function require(string $what): void
    {
        if (!self::available()) {
            throw new RuntimeException(
                "$what needs php_worker's shared store, and php_worker_shared_get() does not exist: "
                . 'this PHP is not running under php_worker (a Caddy with the php_worker module). '
                . 'Outside it (artisan, queue workers, tests, another server) use another store.'
            );
        }
    }
}
