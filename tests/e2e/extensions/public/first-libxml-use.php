<?php
// libxml2's first catalog lookup and first schema validation, by every thread at the same
// moment: the threads meet at an APCu counter, then each builds a SoapClient (whose WSDL
// load resolves through the catalogs), a DOM document with a DTD, and validates it against
// an XML Schema.
require_once __DIR__ . '/../../../extensions/checks.php';
$key = 'first-libxml-use-' . $_GET['round'];
apcu_add($key, 0, 60);
apcu_inc($key);
$deadline = microtime(true) + 5;
while (apcu_fetch($key) < (int) $_GET['threads'] && microtime(true) < $deadline) {
    usleep(100);
}
$client = new SoapClient('data://text/plain;base64,' . base64_encode(php_worker_check_wsdl()),
    ['cache_wsdl' => WSDL_CACHE_NONE]);
$doc = new DOMDocument();
$doc->loadXML('<!DOCTYPE a SYSTEM "http://127.0.0.1:1/none.dtd"><a>x</a>');
$valid = $doc->schemaValidateSource('<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
    . '<xs:element name="a" type="xs:string"/></xs:schema>');
header('Content-Type: application/json');
echo json_encode(['functions' => count($client->__getFunctions()), 'root' => $doc->documentElement->nodeName,
    'valid' => $valid]);
