<?php
// Run with `php-cli` in the clean root (tests/install/clean-root.sh), where none of the
// build's packages is installed: each extension a PHP team relies on works from what the
// binary carries. Prints one "ok" line per check; exits 1 at the first failure.
// Usage: check.php <URL the server answers>

function check(string $what, bool $ok, string $detail = ''): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL $what $detail\n");
        exit(1);
    }
    echo "ok $what\n";
}

$db = new PDO('sqlite::memory:', null, null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
$db->exec('CREATE TABLE t (v TEXT)');
$db->prepare('INSERT INTO t VALUES (?)')->execute(['grüße']);
check('pdo_sqlite', $db->query('SELECT v FROM t')->fetchColumn() === 'grüße');

// ICU's data is inside the binary (libicudata.a): locales, collation, transliteration.
$de = new NumberFormatter('de_DE', NumberFormatter::DECIMAL);
check('intl NumberFormatter de_DE', $de->format(1234567.891) === '1.234.567,891', $de->format(1234567.891));
$sorted = ['z', 'ä', 'a'];
(new Collator('de_DE'))->sort($sorted);
check('intl Collator', $sorted === ['a', 'ä', 'z'], implode(',', $sorted));
check('intl Transliterator', transliterator_transliterate('Any-Latin; Latin-ASCII', 'Ελλάδα') === 'Ellada');

$image = imagecreatetruecolor(8, 8);
imagefilledrectangle($image, 0, 0, 7, 7, imagecolorallocate($image, 255, 0, 0));
foreach (['png' => "\x89PNG", 'jpeg' => "\xFF\xD8\xFF", 'webp' => 'RIFF'] as $format => $magic) {
    ob_start();
    ('image' . $format)($image);
    check("gd $format", str_starts_with(ob_get_clean(), $magic));
}
check('gd freetype', (gd_info()['FreeType Support'] ?? false) === true);

check('mbstring', mb_strtoupper('straße') === 'STRASSE' && mb_strlen('grüße') === 5);

$key = random_bytes(32);
$iv = random_bytes(openssl_cipher_iv_length('aes-256-gcm'));
$sealed = openssl_encrypt('secret', 'aes-256-gcm', $key, OPENSSL_RAW_DATA, $iv, $tag);
check('openssl aes-256-gcm', openssl_decrypt($sealed, 'aes-256-gcm', $key, OPENSSL_RAW_DATA, $iv, $tag) === 'secret');
check('openssl sha256', hash('sha256', 'abc') === 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');

$zip = new ZipArchive();
$path = tempnam(sys_get_temp_dir(), 'zip');
check('zip write', $zip->open($path, ZipArchive::OVERWRITE) === true && $zip->addFromString('a.txt', 'zipped') && $zip->close());
check('zip read', $zip->open($path) === true && $zip->getFromName('a.txt') === 'zipped');
unlink($path);

check('sodium', sodium_crypto_box_open(
    sodium_crypto_box('sealed', $nonce = random_bytes(SODIUM_CRYPTO_BOX_NONCEBYTES), $pair = sodium_crypto_box_keypair()),
    $nonce, $pair) === 'sealed');

// Timezones: PHP's own database, compiled in.
$berlin = new DateTime('2026-07-01 12:00', new DateTimeZone('Europe/Berlin'));
check('timezones', $berlin->format('T P') === 'CEST +02:00', $berlin->format('T P'));

$url = $argv[1] ?? '';
$curl = curl_init($url);
curl_setopt_array($curl, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 10]);
$body = curl_exec($curl);
$status = curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
check("curl $url", $body !== false && $status === 200, "$status " . curl_error($curl));
check('curl HTTP/2 support', (curl_version()['features'] & CURL_VERSION_HTTP2) !== 0);
echo $body === false ? '' : "body: " . substr(strip_tags($body), 0, 200) . "\n";

// Every other extension the binary carries, from what it carries alone (the end-to-end
// suite runs the same checks on the server's threads). Run with -d apc.enable_cli=1.
require __DIR__ . '/checks.php';
foreach (php_worker_extension_checks() as $name => [$ok, $detail]) {
    check($name, $ok, $detail);
}

// The developer extensions ship beside the binary and load only when asked for.
foreach (['pcov' => 'extension', 'excimer' => 'extension'] as $name => $kind) {
    check("$name not loaded unless asked", !extension_loaded($name));
}
