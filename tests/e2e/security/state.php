<?php
// A worker whose requests each set one piece of request-scoped state (?set=NAME) or
// read all of it (?read=1), as JSON. tests/e2e/test_security.py checks that what one
// request set is gone from the next, on the same thread: worker requests are reset as
// PHP's own request shutdown resets a classic request.
//
// With BOOT=1 in the worker's env, the script sets some of the same state before its
// loop, and every request must find it as the script left it there.

$boot = getenv('BOOT') === '1';
if ($boot) {
    ini_set('precision', '7');
    date_default_timezone_set('Europe/Paris');
    setlocale(LC_ALL, 'C.UTF-8');
    mb_internal_encoding('ISO-8859-1');
    bcscale(3);
    libxml_use_internal_errors(true);
    putenv('STATE_BOOT=from-boot');
    set_time_limit(17);
    umask(0027);
    mt_srand(7);
}

// Each probe: [what sets it, what reads it]. A reader never changes what it reads.
$probes = [
    'libxml_errors' => [
        function () {
            libxml_use_internal_errors(true);
            simplexml_load_string('<doc><secret>client-a-secret-fragment</doc>');
        },
        fn () => [libxml_use_internal_errors(null), array_map(fn ($e) => trim($e->message), libxml_get_errors())],
    ],
    'last_response_headers' => [
        fn () => @file_get_contents($_GET['url']),
        fn () => function_exists('http_get_last_response_headers') ? http_get_last_response_headers() : 'n/a',
    ],
    'error_get_last' => [
        fn () => @trigger_error('client-a-secret-error', E_USER_NOTICE),
        fn () => error_get_last()['message'] ?? null,
    ],
    'ini_set' => [
        fn () => [ini_set('precision', '3'), ini_set('serialize_precision', '5'), ini_set('default_charset', 'ISO-8859-15'),
                  ini_set('error_reporting', '0')],
        fn () => [ini_get('precision'), ini_get('serialize_precision'), ini_get('default_charset'), ini_get('error_reporting')],
    ],
    'error_reporting' => [
        fn () => error_reporting(E_ERROR),
        fn () => error_reporting(),
    ],
    'locale' => [
        fn () => setlocale(LC_ALL, 'C.UTF-8'),
        fn () => [setlocale(LC_ALL, 0), setlocale(LC_CTYPE, 0), strtoupper("\xe9")],
    ],
    'timezone' => [
        fn () => date_default_timezone_set('Pacific/Chatham'),
        fn () => date_default_timezone_get(),
    ],
    'set_time_limit' => [
        fn () => set_time_limit(123),
        fn () => ini_get('max_execution_time'),
    ],
    'ignore_user_abort' => [
        fn () => ignore_user_abort(false),
        fn () => ignore_user_abort(),
    ],
    'output_handlers' => [
        fn () => [ob_start(), output_add_rewrite_var('token', 'client-a-secret-token')],
        function () {
            // The URL rewriter's variables: a link rewritten now carries only its own.
            $level = ob_get_level();
            $handlers = ob_list_handlers();
            ob_start();
            output_add_rewrite_var('probe', 'x');
            echo '<a href="/page">p</a>';
            ob_end_flush();
            $html = ob_get_clean();
            output_reset_rewrite_vars();
            return [$level, $handlers, $html];
        },
    ],
    'session' => [
        function () {
            session_id('clientasecretsessionid');
            session_start();
            $_SESSION['who'] = 'client-a';
        },
        fn () => [session_status(), session_id(), $_SESSION ?? null],
    ],
    'putenv' => [
        fn () => putenv('STATE_SECRET=client-a-secret-env'),
        fn () => [getenv('STATE_SECRET'), getenv('STATE_BOOT')],
    ],
    'strtok' => [
        fn () => strtok('client-a-secret-token', '-'),
        fn () => @strtok('-'),
    ],
    'umask' => [
        fn () => umask(0077),
        fn () => decoct(umask()),
    ],
    'mt_srand' => [
        fn () => [mt_srand(42), mt_rand()],
        fn () => mt_rand(),
    ],
    'mbstring' => [
        fn () => [mb_internal_encoding('UTF-16'), mb_substitute_character(0x2a), mb_language('Japanese'),
                  mb_regex_encoding('EUC-JP'), mb_detect_order(['ASCII'])],
        fn () => [mb_internal_encoding(), mb_substitute_character(), mb_language(), mb_regex_encoding(), mb_detect_order()],
    ],
    'bcscale' => [
        fn () => bcscale(9),
        fn () => bcscale(),
    ],
    'json_error' => [
        fn () => json_decode('{client-a-secret'),
        fn () => [json_last_error(), json_last_error_msg()],
    ],
    'preg_error' => [
        fn () => @preg_match('/./u', "client-a-\xff"),
        fn () => preg_last_error(),
    ],
    'openssl_errors' => [
        fn () => @openssl_pkey_get_private('client-a-secret-not-a-key'),
        fn () => openssl_error_string(),
    ],
    'header_callback' => [
        fn () => header_register_callback(function () { header('X-Client-A: secret'); }),
        fn () => 'see the response headers',
    ],
    'stat_cache' => [
        function () {
            $f = sys_get_temp_dir() . '/pw-state-stat-' . getmypid();
            file_put_contents($f, 'x');
            clearstatcache();
            filesize($f);
            file_put_contents($f, 'longer');
            return $f;
        },
        function () {
            // What stat() gives now, cached or not, against what the file holds.
            $f = sys_get_temp_dir() . '/pw-state-stat-' . getmypid();
            $seen = is_file($f) ? filesize($f) : null;
            clearstatcache();
            return $seen === (is_file($f) ? filesize($f) : null);
        },
    ],
    'intl_error' => [
        fn () => @transliterator_create('client-a-secret-rule'),
        fn () => [intl_get_error_code(), intl_get_error_message()],
    ],
    'cwd' => [
        fn () => chdir('/tmp'),
        fn () => getcwd(),
    ],
];

$served = 0;
while (frankenphp_handle_request(function () use ($probes, &$served) {
    $served++;
    header('Content-Type: application/json');
    if (isset($_GET['set'])) {
        $probes[$_GET['set']][0]();
        // The handler may leave buffers open (output_handlers): the shutdown sends them.
        echo json_encode(['set' => $_GET['set'], 'thread' => $served]);
        return;
    }
    $state = [];
    foreach ($probes as $name => [, $read]) {
        $state[$name] = $read();
    }
    echo json_encode(['state' => $state, 'thread' => $served, 'pid' => getmypid()], JSON_PARTIAL_OUTPUT_ON_ERROR);
})) {
}
