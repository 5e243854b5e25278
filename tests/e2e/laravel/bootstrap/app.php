<?php
// The test app, on Debian's php-laravel-framework (no Composer): Laravel 8, Debian 12's,
// from /usr/share/php; or a current Laravel unpacked from Debian 13 or sid into a test
// root (scripts/fetch-php-app.py), whose PHP folder LARAVEL_PHP_ROOT names. Debian's
// packages autoload through an autoload.php per package, which require those of their
// dependencies through the include path.
$root = getenv('LARAVEL_PHP_ROOT') ?: ($_SERVER['LARAVEL_PHP_ROOT'] ?? '/usr/share/php');
$laravel = "$root/Illuminate/autoload.php";
if (!is_file($laravel)) {
    throw new RuntimeException("$laravel is missing: install Debian's php-laravel-framework "
        . '(scripts/install-deps.sh --tests does), or unpack a newer one (scripts/fetch-php-app.py)');
}
if (!in_array($root, explode(PATH_SEPARATOR, get_include_path()), true)) {
    set_include_path($root . PATH_SEPARATOR . get_include_path());
}
require_once $laravel;
require_once __DIR__ . '/../../../../adapters/autoload.php';

spl_autoload_register(static function (string $class): void {
    $file = __DIR__ . '/../app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
    if (str_starts_with($class, 'App\\') && is_file($file)) {
        require $file;
    }
});

// Laravel writes its provider manifests (bootstrap/cache/*.php by default) while it
// boots: keep them out of the repository.
$cache = getenv('LARAVEL_CACHE_DIR') ?: sys_get_temp_dir() . '/php-worker-laravel-' . md5(__DIR__);
foreach (['', '/sessions', '/views'] as $dir) {
    if (!is_dir($cache . $dir)) {
        @mkdir($cache . $dir, 0777, true);
    }
}
// config/session.php and config/view.php put their files there too.
$_SERVER['LARAVEL_CACHE_DIR'] = $_ENV['LARAVEL_CACHE_DIR'] = $cache;
foreach (['APP_PACKAGES_CACHE' => 'packages.php', 'APP_SERVICES_CACHE' => 'services.php',
          'APP_CONFIG_CACHE' => 'config.php', 'APP_ROUTES_CACHE' => 'routes.php',
          'APP_EVENTS_CACHE' => 'events.php'] as $name => $file) {
    $_SERVER[$name] = $_ENV[$name] = "$cache/$file";
}

$app = new Illuminate\Foundation\Application(dirname(__DIR__));
$app->singleton(Illuminate\Contracts\Http\Kernel::class, App\Http\Kernel::class);
$app->singleton(Illuminate\Contracts\Console\Kernel::class, App\Console\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\Exceptions\Handler::class);
$app->booted(static function () {
    require __DIR__ . '/../routes/web.php';
});

return $app;
