<?php
// One call into each extension php_worker ships that needs no server: the end-to-end
// suite runs them on PHP threads of the server (tests/e2e/test_extensions.py, several
// requests at once) and the install test with php-cli in a clean root
// (tests/install/check.php). Returns [name => [ok, detail]].

function php_worker_extension_checks(): array
{
    // A 64x48 photo-like JPEG, drawn with gd, for imagick and exif.
    $jpeg = tempnam(sys_get_temp_dir(), 'photo');
    $gd = imagecreatetruecolor(64, 48);
    for ($x = 0; $x < 64; $x++) {
        imageline($gd, $x, 0, $x, 47, imagecolorallocate($gd, $x * 4, 128, 255 - $x * 4));
    }
    imagejpeg($gd, $jpeg, 90);
    $results = [];
    $check = static function (string $name, callable $fn) use (&$results): void {
        try {
            [$ok, $detail] = $fn() + [1 => ''];
            $results[$name] = [(bool) $ok, (string) $detail];
        } catch (Throwable $e) {
            $results[$name] = [false, get_class($e) . ': ' . $e->getMessage()];
        }
    };

    $check('redis', static fn () => [class_exists(Redis::class) && defined('Redis::SERIALIZER_IGBINARY')
        && defined('Redis::SERIALIZER_MSGPACK') && defined('Redis::COMPRESSION_ZSTD'), phpversion('redis')]);
    $check('memcached', static fn () => [class_exists(Memcached::class) && Memcached::HAVE_IGBINARY
        && Memcached::HAVE_MSGPACK, phpversion('memcached')]);
    $check('apcu', static function () {
        $key = 'check-' . bin2hex(random_bytes(4));
        return [apcu_enabled() && apcu_store($key, ['a' => 1]) && apcu_fetch($key) === ['a' => 1] && apcu_delete($key),
            'apc.enable_cli=' . ini_get('apc.enable_cli')];
    });
    $check('igbinary', static function () {
        $value = ['k' => [1, 2.5, 'três', null, true], 'o' => new ArrayObject([1])];
        return [igbinary_unserialize(igbinary_serialize($value)) == $value];
    });
    $check('msgpack', static function () {
        $value = ['k' => [1, 2.5, 'três', null, true]];
        return [msgpack_unpack(msgpack_pack($value)) === $value];
    });
    $check('imagick', static function () use ($jpeg) {
        $image = new Imagick($jpeg);
        $image->resizeImage(32, 24, Imagick::FILTER_LANCZOS, 1);
        $image->setImageFormat('jpeg');
        $blob = $image->getImageBlob();
        $back = new Imagick();
        $back->readImageBlob($blob);
        return [$back->getImageWidth() === 32 && $back->getImageHeight() === 24 && str_starts_with($blob, "\xFF\xD8\xFF"),
            'threads ' . Imagick::getResourceLimit(Imagick::RESOURCETYPE_THREAD)];
    });
    $check('soap', static function () {
        $wsdl = 'data://text/plain;base64,' . base64_encode(php_worker_check_wsdl());
        $client = new SoapClient($wsdl, ['cache_wsdl' => WSDL_CACHE_NONE]);
        return [in_array('string add(int $a, int $b)', $client->__getFunctions(), true), implode(',', $client->__getFunctions())];
    });
    $check('gmp', static fn () => [gmp_strval(gmp_pow(2, 100)) === '1267650600228229401496703205376']);
    $check('bcmath', static fn () => [bcadd('0.1', '0.2', 1) === '0.3']);
    $check('sockets', static function () {
        $pair = [];
        $ok = socket_create_pair(AF_UNIX, SOCK_STREAM, 0, $pair) && socket_write($pair[0], 'ping') === 4;
        $got = $ok ? socket_read($pair[1], 4) : '';
        array_map('socket_close', $pair);
        return [$got === 'ping'];
    });
    $check('ldap', static fn () => [ldap_escape('a*(b)', '', LDAP_ESCAPE_FILTER) === 'a\2a\28b\29'
        && ldap_connect('ldap://127.0.0.1:1') !== false]);
    $check('bz2', static fn () => [bzdecompress(bzcompress(str_repeat('php_worker ', 100))) === str_repeat('php_worker ', 100)]);
    $check('zstd', static fn () => [zstd_uncompress(zstd_compress(str_repeat('php_worker ', 100))) === str_repeat('php_worker ', 100),
        phpversion('zstd')]);
    $check('yaml', static fn () => [yaml_parse("a: [1, 2]\nb: {c: d}\n") === ['a' => [1, 2], 'b' => ['c' => 'd']]
        && str_contains(yaml_emit(['x' => 1]), 'x: 1')]);
    $check('ssh2', static function () {
        // libssh2 itself answers: nothing listens on port 1.
        $session = @ssh2_connect('127.0.0.1', 1);
        return [$session === false && defined('SSH2_FINGERPRINT_SHA1'), error_get_last()['message'] ?? ''];
    });
    $check('amqp', static function () {
        // librabbitmq itself answers: nothing listens on port 1.
        $connection = new AMQPConnection(['host' => '127.0.0.1', 'port' => 1, 'connect_timeout' => 1]);
        try {
            $connection->connect();
            return [false, 'connected to port 1'];
        } catch (AMQPConnectionException $e) {
            return [!$connection->isConnected(), $e->getMessage()];
        }
    });
    $check('ast', static fn () => [ast\parse_code('<?php echo 1;', 100)->kind === ast\AST_STMT_LIST]);
    $check('xsl', static function () {
        $xsl = new DOMDocument();
        $xsl->loadXML('<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">'
            . '<xsl:output method="text"/><xsl:template match="/">hi <xsl:value-of select="/a"/></xsl:template></xsl:stylesheet>');
        $processor = new XSLTProcessor();
        $processor->importStylesheet($xsl);
        $doc = new DOMDocument();
        $doc->loadXML('<a>there</a>');
        return [$processor->transformToXml($doc) === 'hi there'];
    });
    $check('tidy', static function () {
        $tidy = tidy_parse_string('<p>unclosed', ['show-body-only' => true], 'utf8');
        $tidy->cleanRepair();
        return [str_contains((string) $tidy, '</p>'), (string) $tidy];
    });
    $check('calendar', static fn () => [cal_days_in_month(CAL_GREGORIAN, 2, 2024) === 29 && easter_days(2026) === 15]);
    $check('gettext', static fn () => [_('untranslated') === 'untranslated' && function_exists('bindtextdomain')]);
    $check('ftp', static fn () => [function_exists('ftp_connect') && @ftp_connect('127.0.0.1', 1, 1) === false]);
    $check('shmop', static function () {
        $shm = shmop_open(random_int(1 << 20, 1 << 30), 'c', 0600, 16);
        $ok = shmop_write($shm, 'php_worker', 0) === 10 && shmop_read($shm, 0, 10) === 'php_worker';
        shmop_delete($shm);
        return [$ok];
    });
    $check('sysvsem sysvshm sysvmsg', static function () {
        $key = random_int(1 << 20, 1 << 30);
        $sem = sem_get($key);
        $shm = shm_attach($key, 1024);
        $queue = msg_get_queue($key);
        $ok = sem_acquire($sem) && shm_put_var($shm, 1, ['v' => 1]) && shm_get_var($shm, 1) === ['v' => 1]
            && sem_release($sem) && msg_send($queue, 1, 'hello') && msg_receive($queue, 1, $type, 64, $message)
            && $message === 'hello';
        shm_remove($shm);
        sem_remove($sem);
        msg_remove_queue($queue);
        return [$ok];
    });
    $check('dba', static function () {
        $path = tempnam(sys_get_temp_dir(), 'dba');
        $db = dba_open($path, 'n', 'cdb_make');
        dba_insert('k', 'v', $db);
        dba_close($db);
        $db = dba_open($path, 'r', 'cdb');
        $ok = dba_fetch('k', $db) === 'v';
        dba_close($db);
        unlink($path);
        return [$ok, implode(',', dba_handlers())];
    });
    $check('pgsql', static function () {
        // libpq itself answers: nothing listens on port 1.
        $connection = @pg_connect('host=127.0.0.1 port=1 connect_timeout=2');
        $error = error_get_last()['message'] ?? '';
        return [$connection === false && str_contains($error, 'onnection refused'), $error];
    });
    $check('readline', static fn () => [function_exists('readline')]);
    $check('exif', static fn () => [function_exists('exif_read_data') && exif_imagetype($jpeg) === IMAGETYPE_JPEG]);
    unlink($jpeg);
    return $results;
}

function php_worker_check_wsdl(): string
{
    return <<<'WSDL'
<?xml version="1.0"?>
<definitions name="Calc" targetNamespace="urn:calc" xmlns:tns="urn:calc"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns="http://schemas.xmlsoap.org/wsdl/">
  <message name="AddRequest"><part name="a" type="xsd:int"/><part name="b" type="xsd:int"/></message>
  <message name="AddResponse"><part name="sum" type="xsd:string"/></message>
  <portType name="CalcPort"><operation name="add"><input message="tns:AddRequest"/><output message="tns:AddResponse"/></operation></portType>
  <binding name="CalcBinding" type="tns:CalcPort">
    <soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="add"><soap:operation soapAction="urn:calc#add"/>
      <input><soap:body use="encoded" namespace="urn:calc" encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"/></input>
      <output><soap:body use="encoded" namespace="urn:calc" encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"/></output>
    </operation>
  </binding>
  <service name="CalcService"><port name="CalcPort" binding="tns:CalcBinding"><soap:address location="http://127.0.0.1:1/"/></port></service>
</definitions>
WSDL;
}
