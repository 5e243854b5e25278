<?php
// For apps without Composer: require this file to autoload the PhpWorker\ classes
// (PSR-4, PhpWorker\ => src/, as composer.json declares).
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'PhpWorker\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 10)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
