<?php
// The Laravel 8 test app's worker in the shape of Laravel Octane's
// bin/frankenphp-worker.php (its eager-boot generation): the worker-mode guard, the
// environment Octane passes (APP_BASE_PATH, MAX_REQUESTS, REQUEST_MAX_EXECUTION_TIME),
// the app booted before the loop, a clone of it per request, errors written as JSON
// records through error_log($line, 4), as Octane's Stream does when STDERR is undefined.
if ((!($_SERVER['FRANKENPHP_WORKER'] ?? false)) || !function_exists('frankenphp_handle_request')) {
    echo 'FrankenPHP must be in worker mode to use this script.';
    exit(1);
}
ignore_user_abort(true);
ini_set('display_errors', 'stderr');
$_ENV['APP_RUNNING_IN_CONSOLE'] = false;

$basePath = $_SERVER['APP_BASE_PATH'] ?? $_ENV['APP_BASE_PATH'] ?? null;
if (!is_string($basePath)) {
    echo 'Cannot find application base path.';
    exit(11);
}
$maxRequests = (int) ($_ENV['MAX_REQUESTS'] ?? $_SERVER['MAX_REQUESTS'] ?? 1000);
$requestMaxExecutionTime = $_ENV['REQUEST_MAX_EXECUTION_TIME'] ?? $_SERVER['REQUEST_MAX_EXECUTION_TIME'] ?? null;
if (PHP_OS_FAMILY === 'Linux' && $requestMaxExecutionTime !== null) {
    set_time_limit((int) $requestMaxExecutionTime);
}

$writeRecord = static function (array $record): void {
    $line = json_encode($record);
    defined('STDERR') ? fwrite(STDERR, $line . PHP_EOL) : error_log($line, 4);
};

$app = require $basePath . '/bootstrap/app.php';
$app->make(Illuminate\Contracts\Http\Kernel::class)->bootstrap();
$app->instance('boot_id', bin2hex(random_bytes(6)));
// What the code said when this worker booted: a reload must boot new code.
$app->instance('boot_version', is_file($basePath . '/app/version.php') ? require $basePath . '/app/version.php' : null);

$handleRequest = static function () use ($app, $writeRecord): void {
    $sandbox = clone $app;
    Illuminate\Container\Container::setInstance($sandbox);
    Illuminate\Support\Facades\Facade::clearResolvedInstances();
    Illuminate\Support\Facades\Facade::setFacadeApplication($sandbox);
    try {
        $kernel = $sandbox->make(Illuminate\Contracts\Http\Kernel::class);
        $kernel->setApplication($sandbox);
        $request = Illuminate\Http\Request::createFromGlobals();
        $response = $kernel->handle($request);
        $response->send(); // fastcgi_finish_request(): the client has its answer here
        $kernel->terminate($request, $response);
    } catch (Throwable $e) {
        (new Symfony\Component\HttpFoundation\Response('Internal Server Error', 500, ['Content-Type' => 'text/plain']))->send();
        $writeRecord(['type' => 'throwable', 'class' => get_class($e), 'message' => $e->getMessage(),
                      'file' => $e->getFile(), 'line' => $e->getLine()]);
    } finally {
        $sandbox->flush();
        Illuminate\Container\Container::setInstance($app);
        Illuminate\Support\Facades\Facade::setFacadeApplication($app);
    }
};

$requestCount = 0;
while ($requestCount < $maxRequests && frankenphp_handle_request($handleRequest)) {
    $requestCount++;
}
// Octane's WorkerStopping: the loop ended because the server asked (stop, reload, restart).
$writeRecord(['type' => 'worker_stopping', 'boot_id' => $app->make('boot_id'), 'requests' => $requestCount]);
gc_collect_cycles();
