<!DOCTYPE html>
<html lang="en">
<head>
    <meta charset="utf-8">
    <meta name="csrf-token" content="{{ csrf_token() }}">
    <title>{{ $title }}</title>
</head>
<body>
    <h1>{{ $title }}</h1>
    <p>Visit {{ $visits }} of this session.</p>
    <ul>
        @foreach ($items as $item)
            <li>{{ $item['name'] }}: {{ number_format($item['price'], 2) }}</li>
        @endforeach
    </ul>
    @if ($errors->any())
        <p class="error">{{ $errors->first() }}</p>
    @endif
</body>
</html>
