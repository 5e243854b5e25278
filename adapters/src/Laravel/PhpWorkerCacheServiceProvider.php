<?php

namespace PhpWorker\Laravel;

use Illuminate\Support\ServiceProvider;

/**
 * Registers the "php_worker" cache driver:
 *
 *     // config/cache.php, 'stores'
 *     'php_worker' => ['driver' => 'php_worker', 'prefix' => 'myapp'],
 *
 * The prefix defaults to the app's cache.prefix, as Laravel's own drivers do.
 *
 * Outside php_worker (artisan, queue workers, PHPUnit, php-fpm) the app still boots: the
 * RuntimeException saying the php_worker functions are missing comes when a php_worker
 * store is first used, so point CACHE_DRIVER elsewhere for those processes.
 */
class PhpWorkerCacheServiceProvider extends ServiceProvider
{
    public function register()
    {
        // In a booting callback, as Laravel's docs advise, so the driver exists before
        // any provider's boot() uses the cache.
        $this->app->booting(function ($app) {
            // The creator is bound to the cache manager: not a static closure.
            $app->make('cache')->extend('php_worker', function ($app, array $config) {
                $prefix = $config['prefix'] ?? $app->make('config')->get('cache.prefix') ?? '';
                return $app->make('cache')->repository(new PhpWorkerStore((string) $prefix));
            });
        });
    }
}
