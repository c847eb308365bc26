// Press Continue for the person: the link was opened in a browser, not fetched by a preview.
document.getElementById("sign-in").submit();
