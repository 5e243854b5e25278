<?php
// The application's bootstrap: expensive, so worker mode runs it once per thread.
require __DIR__ . '/Container.php';

$app = new Container();
usleep(200_000); // the deliberate boot cost: config, routes, service providers
$app->singleton('config', fn () => ['name' => 'octane-shaped', 'booted_at' => microtime(true)]);
$app->scoped('cart', fn () => new ArrayObject());
$app->make('config');

$log = $_SERVER['BOOT_LOG'] ?? getenv('BOOT_LOG');
if ($log) {
    file_put_contents($log, $app->bootId . "\n", FILE_APPEND | LOCK_EX);
}
return $app;
