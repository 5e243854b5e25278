<?php
// The benchmark's WordPress configuration, copied over Debian's wp-config.php (which
// reads /etc/wordpress/) in the bench's copy of the site. The database is the bench's
// own MariaDB, on a Unix socket; WP_HOME follows the Host header, so every server of
// the bench serves the same site on its own port without a redirect.
define('DB_NAME', 'wordpress');
define('DB_USER', 'wordpress');
define('DB_PASSWORD', 'wordpress');
define('DB_HOST', 'localhost:' . getenv('WORDPRESS_DB_SOCKET'));
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
foreach (['AUTH_KEY', 'SECURE_AUTH_KEY', 'LOGGED_IN_KEY', 'NONCE_KEY', 'AUTH_SALT', 'SECURE_AUTH_SALT',
          'LOGGED_IN_SALT', 'NONCE_SALT'] as $key) {
    define($key, "php_worker bench $key");
}
$table_prefix = 'wp_';
define('WP_HOME', 'http://' . ($_SERVER['HTTP_HOST'] ?? '127.0.0.1'));
define('WP_SITEURL', WP_HOME);
// No cron requests spawned from page views, no update checks over the network.
define('DISABLE_WP_CRON', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_HTTP_BLOCK_EXTERNAL', true);
define('WP_DEBUG', false);
if (!defined('ABSPATH')) {
    define('ABSPATH', __DIR__ . '/');
}
require_once ABSPATH . 'wp-settings.php';
