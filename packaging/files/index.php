<?php
// The page the php_worker package serves until /etc/php_worker/Caddyfile says otherwise.
header('Content-Type: text/html; charset=utf-8');
$php = htmlspecialchars(PHP_VERSION . (PHP_ZTS ? ' (ZTS)' : ''));
$opcache = function_exists('opcache_get_status') && opcache_get_status(false) ? 'on' : 'off';
?>
<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>php_worker is running</title></head>
<body>
<h1>php_worker is running</h1>
<p>PHP <?= $php ?>, OPcache <?= $opcache ?>, served by <?= htmlspecialchars(php_sapi_name()) ?>.</p>
<p>This page is <code><?= htmlspecialchars(__FILE__) ?></code>. To serve your application, edit
<code>/etc/php_worker/Caddyfile</code> and run <code>systemctl reload php_worker</code>.
PHP's settings are in <code>/etc/php_worker/php.ini</code>.</p>
</body>
</html>
